//! The resolver that keeps refused addresses away from the connector.
//!
//! Checking a host name before the request and letting the HTTP client
//! resolve it again later is a race an attacker wins with DNS rebinding (the
//! name answers public first, private second). So the client is given this
//! resolver instead: the addresses it returns are the only ones the connector
//! can use, and refused ones are dropped here.
//!
//! The client wraps resolver errors in its own; [`GuardError`] travels inside
//! them and the fetcher finds it again in the error's source chain.

use std::error::Error;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use crate::{AddressClass, FetchError, FetchPolicy, is_allowed};

/// Resolves names with the system resolver and keeps only allowed addresses.
pub(crate) struct GuardedResolver {
    policy: Arc<FetchPolicy>,
}

impl GuardedResolver {
    pub(crate) fn new(policy: Arc<FetchPolicy>) -> Self {
        GuardedResolver { policy }
    }
}

/// A resolution that must fail the fetch, carried through the HTTP client's
/// error.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum GuardError {
    /// Every address of the name was refused; the first refusal is kept.
    #[error("{host} resolves only to refused addresses (first: {address}, {class})")]
    Refused {
        host: String,
        address: IpAddr,
        class: AddressClass,
    },
    /// The lookup itself failed or found nothing.
    #[error("{host}: {message}")]
    Lookup { host: String, message: String },
}

impl From<GuardError> for FetchError {
    fn from(error: GuardError) -> Self {
        match error {
            GuardError::Refused {
                host,
                address,
                class,
            } => FetchError::AddressRefused {
                host,
                address,
                class,
            },
            lookup @ GuardError::Lookup { .. } => FetchError::Resolve(lookup.to_string()),
        }
    }
}

impl GuardError {
    /// Finds a guard error anywhere in `error`'s source chain.
    pub(crate) fn find_in(error: &(dyn Error + 'static)) -> Option<GuardError> {
        let mut current = Some(error);
        while let Some(error) = current {
            if let Some(guard) = error.downcast_ref::<GuardError>() {
                return Some(guard.clone());
            }
            current = error.source();
        }
        None
    }
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = Arc::clone(&self.policy);
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let resolved = tokio::net::lookup_host((host.as_str(), 0))
                .await
                .map_err(|error| GuardError::Lookup {
                    host: host.clone(),
                    message: error.to_string(),
                })?;
            let mut allowed: Vec<SocketAddr> = Vec::new();
            let mut first_refused = None;
            for address in resolved {
                match is_allowed(address.ip(), &policy) {
                    Ok(()) => allowed.push(address),
                    Err(class) => {
                        tracing::debug!(%host, address = %address.ip(), %class, "dropping refused address");
                        first_refused.get_or_insert((address.ip(), class));
                    }
                }
            }
            if allowed.is_empty() {
                let error = match first_refused {
                    Some((address, class)) => GuardError::Refused {
                        host,
                        address,
                        class,
                    },
                    None => GuardError::Lookup {
                        host,
                        message: "no addresses found".to_owned(),
                    },
                };
                return Err(error.into());
            }
            Ok(Box::new(allowed.into_iter()) as Addrs)
        })
    }
}
