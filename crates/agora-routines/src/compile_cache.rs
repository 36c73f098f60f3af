//! Cranelift's per-function compile cache, one for the whole process.
//!
//! Every JavaScript routine is the same QuickJS engine with another memory snapshot, so its
//! functions compile to the same machine code each time. With this cache a new routine (or a
//! program run as an action) costs the translation of each function and a lookup, instead of
//! Cranelift's optimization and register allocation all over again. Cranelift keys an entry by
//! the function and the target's settings, so engines of different configurations can share it.
//!
//! Bounded: once it holds [`CAPACITY_BYTES`], new entries are not kept (those it has stay).

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use wasmtime::CacheStore;

/// The most compiled code the cache keeps, in bytes.
pub(crate) const CAPACITY_BYTES: usize = 64 * 1024 * 1024;

/// Compiled functions by Cranelift's cache key.
#[derive(Debug)]
pub(crate) struct FunctionCache {
    capacity: usize,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    entries: HashMap<Vec<u8>, Arc<[u8]>>,
    bytes: usize,
}

impl FunctionCache {
    fn new(capacity: usize) -> Self {
        Self {
            capacity,
            state: Mutex::default(),
        }
    }

    /// The process's cache.
    pub(crate) fn shared() -> Arc<Self> {
        static SHARED: OnceLock<Arc<FunctionCache>> = OnceLock::new();
        SHARED
            .get_or_init(|| Arc::new(Self::new(CAPACITY_BYTES)))
            .clone()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl CacheStore for FunctionCache {
    fn get(&self, key: &[u8]) -> Option<Cow<'_, [u8]>> {
        let value = self.state().entries.get(key).cloned()?;
        Some(Cow::Owned(value.to_vec()))
    }

    fn insert(&self, key: &[u8], value: Vec<u8>) -> bool {
        let mut state = self.state();
        if state.entries.contains_key(key) {
            return true;
        }
        let size = key.len() + value.len();
        if state.bytes + size > self.capacity {
            return false;
        }
        state.bytes += size;
        state.entries.insert(key.to_vec(), value.into());
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_entries_until_full_then_refuses_new_ones() {
        let cache = FunctionCache::new(10);
        assert!(cache.insert(b"a", vec![1, 2, 3]));
        assert_eq!(cache.get(b"a").as_deref(), Some(&[1u8, 2, 3][..]));
        assert!(cache.insert(b"a", vec![9]), "a kept key stays as it was");
        assert_eq!(cache.get(b"a").as_deref(), Some(&[1u8, 2, 3][..]));
        assert!(!cache.insert(b"b", vec![0; 8]), "4 + 9 bytes exceed 10");
        assert_eq!(cache.get(b"b"), None);
        assert!(cache.insert(b"c", vec![0; 5]));
    }
}
