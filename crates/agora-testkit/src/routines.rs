//! A scripted routine engine for deterministic orchestration tests (test code only).
//!
//! A "component" here is the bytes `scripted:<key>`, and the key names a Rust closure the test
//! registered. `build` turns the JavaScript source `<key>` (surrounding whitespace ignored), a
//! source containing a key registered with [`ScriptedRoutineEngine::routine_containing`] (for
//! code the node writes itself), or such component bytes into component bytes, refusing unknown keys as the real engine refuses
//! code that does not build; `load` refuses unknown bytes as the real engine refuses invalid
//! components. The engine counts builds, loads and runs, so tests can check that nothing is
//! compiled on the request path and that a restart reloads what was stored.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use agora_node::{
    LoadedRoutine, RoutineEngine, RoutineError, RoutineLimits, RoutineSource, ToolHost,
};

type RoutineFuture = Pin<Box<dyn Future<Output = Result<String, RoutineError>> + Send>>;
type Script = dyn Fn(String, Arc<dyn ToolHost>) -> RoutineFuture + Send + Sync;

const PREFIX: &str = "scripted:";

#[derive(Default)]
struct Counters {
    builds: AtomicUsize,
    loads: AtomicUsize,
    runs: AtomicUsize,
}

/// A routine engine whose routines are closures registered by the test.
#[derive(Clone, Default)]
pub struct ScriptedRoutineEngine {
    scripts: Arc<RwLock<HashMap<String, Arc<Script>>>>,
    /// Keys a source may contain rather than be.
    contained: Arc<RwLock<Vec<String>>>,
    counters: Arc<Counters>,
}

impl ScriptedRoutineEngine {
    /// An engine with no routines.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers the routine `key`: `script(body, tools)` is one run.
    pub fn routine<F, Fut>(self, key: &str, script: F) -> Self
    where
        F: Fn(String, Arc<dyn ToolHost>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<String, RoutineError>> + Send + 'static,
    {
        let script: Arc<Script> = Arc::new(move |body, tools| Box::pin(script(body, tools)));
        if let Ok(mut scripts) = self.scripts.write() {
            scripts.insert(key.to_string(), script);
        }
        self
    }

    /// Registers the routine `key` for any JavaScript source that contains `key` (and is no
    /// other key): code the node writes, whose text the test does not spell out.
    pub fn routine_containing<F, Fut>(self, key: &str, script: F) -> Self
    where
        F: Fn(String, Arc<dyn ToolHost>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<String, RoutineError>> + Send + 'static,
    {
        if let Ok(mut contained) = self.contained.write() {
            contained.push(key.to_string());
        }
        self.routine(key, script)
    }

    /// The component bytes of the routine `key`.
    pub fn component(key: &str) -> Vec<u8> {
        format!("{PREFIX}{key}").into_bytes()
    }

    /// How many times `build` was called.
    pub fn builds(&self) -> usize {
        self.counters.builds.load(Ordering::SeqCst)
    }

    /// How many times `load` was called.
    pub fn loads(&self) -> usize {
        self.counters.loads.load(Ordering::SeqCst)
    }

    /// How many runs started.
    pub fn runs(&self) -> usize {
        self.counters.runs.load(Ordering::SeqCst)
    }

    fn script(&self, key: &str) -> Option<Arc<Script>> {
        self.scripts.read().ok()?.get(key).cloned()
    }
}

#[async_trait::async_trait]
impl RoutineEngine for ScriptedRoutineEngine {
    async fn build(&self, source: &RoutineSource) -> Result<Vec<u8>, RoutineError> {
        self.counters.builds.fetch_add(1, Ordering::SeqCst);
        match source {
            RoutineSource::JavaScript(text) => {
                let key = text.trim();
                if self.script(key).is_some() {
                    return Ok(Self::component(key));
                }
                let contained = self.contained.read().ok().and_then(|contained| {
                    contained
                        .iter()
                        .find(|needle| key.contains(needle.as_str()))
                        .cloned()
                });
                match contained {
                    Some(needle) => Ok(Self::component(&needle)),
                    None => Err(RoutineError::Build(format!(
                        "no scripted routine {key:?} (1:1)"
                    ))),
                }
            }
            RoutineSource::Component(bytes) => {
                let key = key_of(bytes)?;
                match self.script(&key) {
                    Some(_) => Ok(bytes.clone()),
                    None => Err(RoutineError::InvalidComponent(format!(
                        "no scripted routine {key:?}"
                    ))),
                }
            }
        }
    }

    async fn load(&self, component: &[u8]) -> Result<Arc<dyn LoadedRoutine>, RoutineError> {
        self.counters.loads.fetch_add(1, Ordering::SeqCst);
        let key = key_of(component)?;
        let script = self.script(&key).ok_or_else(|| {
            RoutineError::InvalidComponent(format!("no scripted routine {key:?}"))
        })?;
        Ok(Arc::new(ScriptedRoutine {
            script,
            counters: self.counters.clone(),
        }))
    }
}

fn key_of(component: &[u8]) -> Result<String, RoutineError> {
    std::str::from_utf8(component)
        .ok()
        .and_then(|text| text.strip_prefix(PREFIX))
        .map(str::to_string)
        .ok_or_else(|| RoutineError::InvalidComponent("not a scripted component".into()))
}

struct ScriptedRoutine {
    script: Arc<Script>,
    counters: Arc<Counters>,
}

#[async_trait::async_trait]
impl LoadedRoutine for ScriptedRoutine {
    async fn run(
        &self,
        body: &str,
        tools: Arc<dyn ToolHost>,
        _limits: RoutineLimits,
    ) -> Result<String, RoutineError> {
        self.counters.runs.fetch_add(1, Ordering::SeqCst);
        (self.script)(body.to_string(), tools).await
    }
}
