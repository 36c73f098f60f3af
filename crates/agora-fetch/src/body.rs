//! Reading a response body under a size limit.
//!
//! `reqwest` would buffer a whole body whatever its size, so every body this crate reads, from
//! an untrusted source or an operator's target, is read chunk by chunk and refused as soon as it
//! passes the limit (or at once, when the declared length already does).

use reqwest::Response;

use crate::FetchError;
use crate::fetcher::transport_error;

/// The body of `response`, at most `limit` bytes.
pub(crate) async fn read_limited(
    response: &mut Response,
    limit: usize,
) -> Result<Vec<u8>, FetchError> {
    let too_large = FetchError::TooLarge { limit };
    if response
        .content_length()
        .is_some_and(|length| length > limit as u64)
    {
        return Err(too_large);
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(transport_error)? {
        if chunk.len() > limit - body.len() {
            return Err(too_large);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}
