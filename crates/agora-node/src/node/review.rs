//! The operator's review of routines the programmer wrote under the `review` activation policy
//! (`programmer.activation`): approve, reject with a reason, or edit. An edit is examined on the
//! protocol's kept examples exactly as the programmer's candidates are, and only a pass is
//! stored, as a new pending routine that replaces the reviewed one; so no routine answers that
//! failed its examination or that nobody approved.

use agora_protocol::ProtocolHash;
use agora_store::{ReviewDecision, Routine, RoutineOrigin, RoutineStatus};

use super::programming::{Examination, JobSubject, Prepared, Programmer};
use crate::routine_registry::{ProtocolInput, RegistryError, RoutineSpec};
use crate::routine_table::limits_of;
use crate::routines::RoutineSource;

/// An operator's decision on a pending routine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Review {
    /// It may answer: it becomes active.
    Approve,
    /// It may not; the reason goes into the programmer's next prompt for the protocol.
    Reject {
        /// Why, for the programmer (and the record).
        reason: String,
    },
    /// Replace it with this JavaScript, once it passes the examination; the edit then waits
    /// for its own approval.
    Edit {
        /// The edited source.
        source: String,
    },
}

impl Programmer {
    /// Examines `source` as an edit of the pending routine `reference` and, when it passes,
    /// stores it as a new pending routine and records the edit on the old one.
    pub(super) async fn edit_routine(
        &self,
        reference: &str,
        reviewer: &str,
        source: &str,
    ) -> Result<Routine, RegistryError> {
        let registry = self.core.routines();
        let routine = registry.find(reference).await?;
        if routine.status != RoutineStatus::Pending {
            return Err(RegistryError::Invalid(format!(
                "the routine {:?} is {}, not pending: only a pending routine can be edited",
                routine.name, routine.status
            )));
        }
        let engine = self
            .core
            .routines
            .engine()
            .cloned()
            .ok_or(RegistryError::NoEngine)?;
        let hash: ProtocolHash = routine.protocol_hash;
        let document = self
            .core
            .store
            .document(&hash)
            .await?
            .ok_or(RegistryError::UnknownProtocol(hash))?
            .document;
        let config = &self.core.config.programmer;
        let Some(Prepared { bench, .. }) = hash.bench(self, &document, config).await else {
            return Err(RegistryError::Invalid(
                "the protocol has no kept examples to examine the edit on".into(),
            ));
        };
        let limits = limits_of(&routine);
        let examined = ProtocolHash::examine(&bench, engine.as_ref(), source, limits).await;
        let (source, component) = match examined {
            Examination::Unbuilt(unbuilt) => {
                return Err(RegistryError::Rejected(format!(
                    "the edit does not build: {}",
                    unbuilt.report
                )));
            }
            Examination::Examined {
                report, pass: None, ..
            } => {
                return Err(RegistryError::Rejected(format!(
                    "the edit failed its examination: {report}"
                )));
            }
            Examination::Examined {
                source,
                pass: Some(component),
                ..
            } => (source, component),
        };
        let spec = RoutineSpec {
            name: edited_name(&routine.name),
            protocol: ProtocolInput::Hash(hash),
            source: RoutineSource::JavaScript(source),
            tools: routine.tools.clone(),
            limits,
            origin: RoutineOrigin::Human,
            activate: false,
        };
        let edited = registry.add_built(spec, component, true).await?;
        let reason = format!("replaced by the edited routine {:?}", edited.name);
        registry
            .review(reference, reviewer, ReviewDecision::Edited, reason)
            .await?;
        Ok(edited)
    }
}

/// The name of an edit of the routine `name`: `name-edit`, or the next `-editN`.
fn edited_name(name: &str) -> String {
    let (base, n) = match name.rsplit_once("-edit") {
        Some((base, "")) => (base, 2),
        Some((base, digits)) if digits.chars().all(|c| c.is_ascii_digit()) => {
            (base, digits.parse::<u32>().unwrap_or(1) + 1)
        }
        _ => (name, 1),
    };
    let suffix = if n == 1 {
        "-edit".to_string()
    } else {
        format!("-edit{n}")
    };
    let keep = 64 - suffix.len();
    let base: String = base.chars().take(keep).collect();
    format!("{base}{suffix}")
}

#[cfg(test)]
mod tests {
    use super::edited_name;

    #[test]
    fn an_edit_is_named_after_the_routine_it_replaces() {
        assert_eq!(edited_name("llm-abc"), "llm-abc-edit");
        assert_eq!(edited_name("llm-abc-edit"), "llm-abc-edit2");
        assert_eq!(edited_name("llm-abc-edit9"), "llm-abc-edit10");
        assert_eq!(edited_name(&"x".repeat(64)).len(), 64);
    }
}
