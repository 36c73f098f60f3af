//! What more than one of the CLI's test binaries needs.

use std::io::{Read, Write};
use std::net::TcpStream;

/// One HTTP/1.1 exchange; returns the status and the body.
pub fn http(
    base: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &[u8],
) -> (u16, String) {
    let address = base.strip_prefix("http://").unwrap();
    let mut stream = TcpStream::connect(address).unwrap();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\
         Content-Type: text/plain\r\nContent-Length: {}\r\n",
        body.len()
    );
    if let Some(token) = token {
        head.push_str(&format!("Authorization: Bearer {token}\r\n"));
    }
    head.push_str("\r\n");
    // One write: a server that answers before reading the body (a refused write) closes the
    // connection, and body bytes arriving after that would reset it under the answer.
    let mut request = head.into_bytes();
    request.extend_from_slice(body);
    stream.write_all(&request).unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, body.to_string())
}
