//! The node's side of the routine registry: operator changes that take effect at once, and
//! the periodic sync that picks up changes made by other processes.

use agora_store::Routine;

use super::core::{Core, NodeError};
use crate::routine_registry::{RegistryError, RoutineRegistry, RoutineSpec};
use crate::routine_table::SyncReport;

impl Core {
    /// The registry over this node's store, engine and tools.
    pub(crate) fn routines(&self) -> RoutineRegistry {
        RoutineRegistry::new(
            self.store.clone(),
            self.routines.engine().cloned(),
            self.tools.clone(),
            self.clock.clone(),
        )
    }

    /// Loads the store's active routines when they changed since the last sync (at start-up,
    /// then every few seconds from the server's background task). Cheap when nothing changed:
    /// one read of the routines version.
    pub(crate) async fn sync_routines(&self) -> Result<SyncReport, NodeError> {
        Ok(self.routines.sync(&self.store).await?)
    }

    /// Adds a routine and, if it is active, serves with it at once.
    pub(crate) async fn add_routine(&self, spec: RoutineSpec) -> Result<Routine, RegistryError> {
        self.synced(self.routines().add(spec).await).await
    }

    /// Activates a routine (disabling its protocol's other one) and serves with it at once.
    pub(crate) async fn enable_routine(&self, reference: &str) -> Result<Routine, RegistryError> {
        self.synced(self.routines().enable(reference).await).await
    }

    /// Disables a routine; its protocol goes back to the LLM at once.
    pub(crate) async fn disable_routine(&self, reference: &str) -> Result<Routine, RegistryError> {
        self.synced(self.routines().disable(reference).await).await
    }

    /// Removes a routine; its protocol goes back to the LLM at once.
    pub(crate) async fn remove_routine(&self, reference: &str) -> Result<Routine, RegistryError> {
        self.synced(self.routines().remove(reference).await).await
    }

    /// Approves a pending routine, which serves at once.
    pub(crate) async fn approve_routine(
        &self,
        reference: &str,
        reviewer: &str,
    ) -> Result<Routine, RegistryError> {
        self.synced(self.routines().approve(reference, reviewer).await)
            .await
    }

    /// `changed`, once the node serves with it: [`Self::sync_after_change`] after a change
    /// that was stored.
    pub(super) async fn synced(
        &self,
        changed: Result<Routine, RegistryError>,
    ) -> Result<Routine, RegistryError> {
        let routine = changed?;
        self.sync_after_change().await;
        Ok(routine)
    }

    /// The change is stored; a failed reload is logged and retried by the periodic sync.
    pub(crate) async fn sync_after_change(&self) {
        if let Err(error) = self.sync_routines().await {
            tracing::error!(%error, "could not reload routines after a change");
        }
    }
}
