//! `agora demo network`: builds the LLM (local model, OpenAI, or a cassette replay, optionally
//! recording), runs the screenplay (in this process, or with the agents in worker processes)
//! and writes the run record.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agora_llm::{ChatRequest, ChatResponse, Llm, LlmError, LocalServer};
use agora_node::RoutineEngine;
use agora_server::runtime::build_llm;
use agora_server::{LlmBackend, LlmSettings, RoutineRuntimeSettings, build_routine_engine};
use anyhow::{Context, bail};

use crate::hosting::WorkerLaunch;
use crate::record::{Mode, RunRecord, Sample};
use crate::run::{Checkpoint, Halt, RunOptions, run_screenplay, run_screenplay_in_workers};
use crate::setup::ServerSetup;
use crate::spec::{NetworkSpec, embedded_screenplay, parse_screenplay};

/// Which LLM answers.
#[derive(Debug, Clone, PartialEq)]
pub enum LlmChoice {
    /// The installed local model (started if `url` is none).
    Local {
        /// An already running OpenAI-compatible server.
        url: Option<String>,
    },
    /// OpenAI's API (`$OPENAI_API_KEY`).
    OpenAi,
    /// A recorded cassette, offline; any unrecorded call fails the run.
    Replay(PathBuf),
}

impl LlmChoice {
    /// Parses `local`, `openai`, `replay:FILE` or an `http(s)://` base URL.
    pub fn parse(text: &str) -> anyhow::Result<LlmChoice> {
        Ok(match text {
            "local" => LlmChoice::Local { url: None },
            "openai" => LlmChoice::OpenAi,
            url if url.starts_with("http://") || url.starts_with("https://") => LlmChoice::Local {
                url: Some(url.to_string()),
            },
            other => match other.strip_prefix("replay:") {
                Some(file) if !file.is_empty() => LlmChoice::Replay(PathBuf::from(file)),
                _ => bail!(
                    "--llm must be local, openai, replay:FILE or an http(s) base URL, not {other:?}"
                ),
            },
        })
    }
}

/// A demo run's settings.
#[derive(Debug, Clone)]
pub struct NetworkDemo {
    /// Queries of the screenplay to run.
    pub queries: usize,
    /// Thresholds.
    pub mode: Mode,
    /// The LLM.
    pub llm: LlmChoice,
    /// Record every LLM call to this cassette, resuming from what it holds.
    pub record: Option<PathBuf>,
    /// Where the network's stores go (emptied first).
    pub dir: PathBuf,
    /// The mock tools' seed.
    pub seed: u64,
    /// Longest a query may take.
    pub query_timeout: Duration,
    /// Show a progress bar.
    pub progress: bool,
    /// Write the run record here at every protocol database sync (every 10 queries), so a run
    /// that dies leaves the queries it finished; the caller writes the final one.
    pub checkpoint: Option<PathBuf>,
    /// Processes hosting the agents: 1 hosts the whole network here; N > 1 starts N worker
    /// processes (`agora demo network-worker`) that share the agents, and keeps the protocol
    /// databases and the runner here.
    pub processes: usize,
    /// The `agora` executable workers are started from (this program when none).
    pub worker_program: Option<PathBuf>,
    /// The screenplay file to run (the committed format); the embedded paper's when none.
    pub screenplay: Option<PathBuf>,
    /// Run a stratified sample of the screenplay instead of all of it (`queries` then counts
    /// the sample's queries).
    pub sample: Option<Sample>,
    /// How the agents answer and program.
    pub setup: ServerSetup,
}

impl NetworkDemo {
    /// The runner's options for this demo, given what opening the LLM decided.
    fn run_options(
        &self,
        llm_description: String,
        native_tools: bool,
        halt: Option<Halt>,
        checkpoint: Option<Checkpoint>,
    ) -> RunOptions {
        RunOptions {
            queries: self.queries,
            sample: self.sample,
            mode: self.mode,
            dir: self.dir.clone(),
            seed: self.seed,
            query_timeout: self.query_timeout,
            llm_description,
            progress: self.progress,
            native_tools,
            setup: self.setup.clone(),
            halt,
            checkpoint,
        }
    }
}

/// Writes a run record as pretty JSON, through a temporary file and a rename, so a reader (or a
/// crash) never sees half a record.
pub fn write_run(path: &Path, run: &RunRecord) -> anyhow::Result<()> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    let partial = path.with_extension("json.partial");
    std::fs::write(&partial, serde_json::to_string_pretty(run)? + "\n")
        .with_context(|| format!("writing {}", partial.display()))?;
    std::fs::rename(&partial, path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// The replayed LLM, noting the first call its cassette could not answer.
struct ReplayGuard {
    inner: Arc<dyn Llm>,
    missed: Mutex<Option<String>>,
    /// Where the first missed call is written (the cassette's path, `.missed.json` replacing its
    /// extension).
    missed_file: PathBuf,
}

#[async_trait::async_trait]
impl Llm for ReplayGuard {
    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let result = self.inner.chat(request).await;
        if let Err(error @ LlmError::NotRecorded { .. }) = &result
            && let Ok(mut missed) = self.missed.lock()
            && missed.is_none()
        {
            let asked = request
                .messages
                .last()
                .map(|m| m.content.chars().take(200).collect::<String>())
                .unwrap_or_default();
            // The whole request goes next to the cassette: diffing it against the recorded
            // calls shows where a run left its recording.
            let written = serde_json::to_string(request)
                .ok()
                .and_then(|json| std::fs::write(&self.missed_file, json).ok())
                .map(|()| format!(" (the whole call: {})", self.missed_file.display()))
                .unwrap_or_default();
            *missed = Some(format!(
                "the cassette holds no answer for a call ({error}); it asked: {asked}{written}"
            ));
        }
        result
    }

    fn model(&self) -> String {
        self.inner.model()
    }
}

/// The LLM a run uses, opened.
pub struct OpenedLlm {
    /// The client every node of this process shares.
    pub llm: Arc<dyn Llm>,
    /// The LLM, in words, for the record.
    pub description: String,
    /// The local model's server, when this process started it.
    pub local_server: Option<LocalServer>,
    /// Set for a replay: the first call the cassette could not answer.
    pub halt: Option<Halt>,
    /// The responder uses the endpoint's native tool calling (OpenAI).
    pub native_tools: bool,
}

/// Opens the LLM `choice`, recording to `record` when given (resuming from what it holds);
/// `timeout` bounds each call.
pub async fn open_llm(
    choice: &LlmChoice,
    record: Option<PathBuf>,
    timeout: Duration,
) -> anyhow::Result<OpenedLlm> {
    let mut settings = LlmSettings {
        timeout_secs: timeout.as_secs().max(1),
        record,
        ..LlmSettings::default()
    };
    let native_tools = match choice {
        LlmChoice::Local { url } => {
            settings.local.url = url.clone();
            false
        }
        LlmChoice::OpenAi => {
            settings.backend = LlmBackend::Openai;
            settings.max_concurrency = 4;
            true
        }
        LlmChoice::Replay(file) => {
            settings.backend = LlmBackend::Replay;
            settings.replay = Some(file.clone());
            false
        }
    };
    let (mut llm, description, local_server) = build_llm(&settings).await?;
    let mut halt: Option<Halt> = None;
    if let LlmChoice::Replay(cassette) = choice {
        let guard = Arc::new(ReplayGuard {
            inner: llm,
            missed: Mutex::new(None),
            missed_file: cassette.with_extension("missed.json"),
        });
        let watched = guard.clone();
        halt = Some(Arc::new(move || {
            watched.missed.lock().ok().and_then(|missed| missed.clone())
        }));
        llm = guard;
    }
    Ok(OpenedLlm {
        llm,
        description,
        local_server,
        halt,
        native_tools,
    })
}

/// The routine runtime of a demo process; compiled routines are cached next to `dir`.
pub fn demo_routine_engine(
    dir: &Path,
    query_timeout: Duration,
    today: &str,
) -> anyhow::Result<Arc<dyn RoutineEngine>> {
    // Routines see noon of the screenplay's day (the `currentDate` mock's date) on their wall
    // clock, whatever the host's clock says, so that replays take the recorded paths.
    let noon: jiff::Timestamp = format!("{today}T12:00:00Z")
        .parse()
        .with_context(|| format!("the network's date {today:?} is not YYYY-MM-DD"))?;
    build_routine_engine(
        &RoutineRuntimeSettings {
            artifact_dir: Some(dir.with_extension("artifacts")),
            // A server's tools ask other agents, which may take as long as a query.
            max_tool_wait_secs: Some(query_timeout.as_secs().max(1)),
            fixed_wall_clock_unix_secs: u64::try_from(noon.as_second()).ok(),
            ..RoutineRuntimeSettings::default()
        },
        "sqlite://:memory:",
    )
    .context("starting the routine runtime (AGORA_JS_ENGINE)")
}

/// Runs the demo and returns the run record.
pub async fn run_demo(demo: NetworkDemo) -> anyhow::Result<RunRecord> {
    if demo.queries == 0 {
        bail!("--queries must be at least 1");
    }
    let spec = Arc::new(NetworkSpec::embedded()?);
    let entries = match &demo.screenplay {
        None => embedded_screenplay()?,
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            parse_screenplay(&text).with_context(|| format!("parsing {}", path.display()))?
        }
    };
    let entries = match demo.sample {
        Some(sample) => sample.draw(&entries),
        None => entries,
    };
    let checkpoint = demo
        .checkpoint
        .clone()
        .map(|path| -> Checkpoint { Arc::new(move |run: &RunRecord| write_run(&path, run)) });
    if demo.processes > 1 {
        return run_in_workers(demo, spec, &entries, checkpoint).await;
    }
    let opened = open_llm(&demo.llm, demo.record.clone(), demo.query_timeout).await?;
    std::fs::create_dir_all(&demo.dir)
        .with_context(|| format!("creating {}", demo.dir.display()))?;
    let routine_engine = demo_routine_engine(&demo.dir, demo.query_timeout, &spec.today)?;
    let result = run_screenplay(
        spec,
        &entries,
        opened.llm,
        Some(routine_engine),
        demo.run_options(
            opened.description,
            opened.native_tools,
            opened.halt,
            checkpoint,
        ),
    )
    .await;
    if let Some(server) = opened.local_server {
        server.stop().await;
    }
    result
}

/// `--processes N`: the agents in N worker processes (this program again), the protocol
/// databases and the runner here.
async fn run_in_workers(
    demo: NetworkDemo,
    spec: Arc<NetworkSpec>,
    entries: &[crate::spec::Entry],
    checkpoint: Option<Checkpoint>,
) -> anyhow::Result<RunRecord> {
    if demo.record.is_some() {
        bail!(
            "--record needs the one-process mode (--processes 1): a cassette is written by one \
             process"
        );
    }
    let program = match &demo.worker_program {
        Some(program) => program.clone(),
        None => std::env::current_exe().context("finding this program to start workers")?,
    };
    // Workers get the same LLM; a local model is started once, here, and shared.
    let mut local_server = None;
    let (llm, description) = match &demo.llm {
        LlmChoice::Local { url: Some(url) } => (url.clone(), format!("local model at {url}")),
        LlmChoice::Local { url: None } => {
            let opened = open_llm(&demo.llm, None, demo.query_timeout).await?;
            let server = opened
                .local_server
                .context("the local model server did not start")?;
            let url = server.base_url();
            local_server = Some(server);
            (url, opened.description)
        }
        LlmChoice::OpenAi => ("openai".to_string(), "OpenAI".to_string()),
        LlmChoice::Replay(file) => (
            format!("replay:{}", file.display()),
            format!("replay of {}", file.display()),
        ),
    };
    let launch = WorkerLaunch {
        program,
        processes: demo.processes,
        llm,
    };
    let result = run_screenplay_in_workers(
        spec,
        entries,
        &launch,
        demo.run_options(
            format!("{description}, {} worker processes", demo.processes),
            matches!(demo.llm, LlmChoice::OpenAi),
            // Each worker watches its own replay; a miss stops the run through its ledger read.
            None,
            checkpoint,
        ),
    )
    .await;
    if let Some(server) = local_server {
        server.stop().await;
    }
    result
}
