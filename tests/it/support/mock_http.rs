//! A small HTTP/1.1 server on 127.0.0.1 for protocol tests: it records every request
//! and answers as a handler decides, including the ways real servers misbehave
//! (bodies dribbled out a few bytes at a time, streams cut off, silence).

#![allow(dead_code)] // each test binary uses a different part of it

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One request as the server received it.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    /// Path and query, as sent.
    pub target: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

/// What the server does with a request.
pub enum Action {
    /// Answer with a status, headers and a body.
    Respond { status: u16, headers: Vec<(String, String)>, body: Body },
    /// Read the request, then say nothing until the test ends.
    Silent,
}

pub enum Body {
    /// Sent at once with a `Content-Length`.
    Full(Vec<u8>),
    /// Sent in pieces, each flushed on its own with a short pause so the client reads
    /// them separately. `chunked` uses chunked transfer encoding (as streaming servers
    /// do), otherwise the body ends when the connection closes. `then` says what
    /// happens after the last piece.
    Pieces { pieces: Vec<Vec<u8>>, chunked: bool, then: After },
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum After {
    /// End the body properly.
    End,
    /// Close the connection without ending the body (a crash mid-stream).
    Cut,
    /// Keep the connection open and send nothing more.
    Stall,
}

impl Action {
    pub fn json(status: u16, value: &serde_json::Value) -> Self {
        Self::raw(status, "application/json", value.to_string().into_bytes())
    }

    pub fn raw(status: u16, content_type: &str, body: Vec<u8>) -> Self {
        Action::Respond { status, headers: vec![("Content-Type".into(), content_type.into())], body: Body::Full(body) }
    }

    pub fn with_header(mut self, name: &str, value: &str) -> Self {
        if let Action::Respond { headers, .. } = &mut self {
            headers.push((name.into(), value.into()));
        }
        self
    }

    /// An event stream written in pieces of 1–7 bytes (seeded, so reproducible).
    pub fn event_stream(stream: &[u8], seed: u64, chunked: bool, then: After) -> Self {
        Action::Respond {
            status: 200,
            headers: vec![("Content-Type".into(), "text/event-stream".into()), ("Cache-Control".into(), "no-cache".into())],
            body: Body::Pieces { pieces: split_randomly(stream, seed), chunked, then },
        }
    }
}

/// Cut `bytes` into pieces of 1 to 7 bytes.
pub fn split_randomly(bytes: &[u8], seed: u64) -> Vec<Vec<u8>> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut pieces = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        let n = rng.usize(1..=7).min(rest.len());
        pieces.push(rest[..n].to_vec());
        rest = &rest[n..];
    }
    pieces
}

type Handler = dyn Fn(&Recorded, usize) -> Action + Send + Sync;

pub struct MockServer {
    addr: SocketAddr,
    hits: Arc<AtomicUsize>,
    requests: Arc<Mutex<Vec<Recorded>>>,
    stop: Arc<AtomicBool>,
    acceptor: Option<std::thread::JoinHandle<()>>,
}

impl MockServer {
    /// Start a server; `handler` gets each request and its 0-based arrival number.
    pub fn start(handler: impl Fn(&Recorded, usize) -> Action + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a local port");
        let addr = listener.local_addr().expect("local address");
        let hits = Arc::new(AtomicUsize::new(0));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let handler: Arc<Handler> = Arc::new(handler);
        let acceptor = {
            let (hits, requests, stop) = (hits.clone(), requests.clone(), stop.clone());
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(stream) = stream else { continue };
                    let (hits, requests, stop, handler) = (hits.clone(), requests.clone(), stop.clone(), handler.clone());
                    std::thread::spawn(move || serve(stream, &hits, &requests, &stop, &*handler));
                }
            })
        };
        Self { addr, hits, requests, stop, acceptor: Some(acceptor) }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Requests received so far.
    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }
}

impl Drop for MockServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr); // wake the acceptor
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

fn serve(mut stream: TcpStream, hits: &AtomicUsize, requests: &Mutex<Vec<Recorded>>, stop: &AtomicBool, handler: &Handler) {
    let _ = stream.set_nodelay(true);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let Some(request) = read_request(&mut stream) else { return };
    let index = hits.fetch_add(1, Ordering::SeqCst);
    requests.lock().unwrap().push(request.clone());
    match handler(&request, index) {
        Action::Silent => hold(stop),
        Action::Respond { status, headers, body } => {
            let _ = respond(&mut stream, status, &headers, body, stop);
        }
    }
}

/// Keep a connection open, saying nothing, until the test ends (at most 30 s).
fn hold(stop: &AtomicBool) {
    let until = Instant::now() + Duration::from_secs(30);
    while !stop.load(Ordering::SeqCst) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn read_request(stream: &mut TcpStream) -> Option<Recorded> {
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_string();
    let target = parts.next()?.to_string();
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).ok()?;
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let (name, value) = line.split_once(':')?;
        headers.push((name.trim().to_string(), value.trim().to_string()));
    }
    let length: usize = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(Recorded { method, target, headers, body })
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

fn respond(stream: &mut TcpStream, status: u16, headers: &[(String, String)], body: Body, stop: &AtomicBool) -> std::io::Result<()> {
    let mut head = format!("HTTP/1.1 {status} {}\r\nConnection: close\r\n", reason(status));
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    match body {
        Body::Full(bytes) => {
            head.push_str(&format!("Content-Length: {}\r\n\r\n", bytes.len()));
            stream.write_all(head.as_bytes())?;
            stream.write_all(&bytes)?;
            stream.flush()
        }
        Body::Pieces { pieces, chunked, then } => {
            if chunked {
                head.push_str("Transfer-Encoding: chunked\r\n");
            }
            head.push_str("\r\n");
            stream.write_all(head.as_bytes())?;
            stream.flush()?;
            for piece in pieces {
                if chunked {
                    stream.write_all(format!("{:x}\r\n", piece.len()).as_bytes())?;
                    stream.write_all(&piece)?;
                    stream.write_all(b"\r\n")?;
                } else {
                    stream.write_all(&piece)?;
                }
                stream.flush()?;
                std::thread::sleep(Duration::from_micros(500));
            }
            match then {
                After::End if chunked => {
                    stream.write_all(b"0\r\n\r\n")?;
                    stream.flush()
                }
                After::End | After::Cut => Ok(()),
                After::Stall => {
                    hold(stop);
                    Ok(())
                }
            }
        }
    }
}
