//! A fault-injecting HTTP proxy on 127.0.0.1 in front of the test registry:
//! every request is forwarded (with `Connection: close`, so each is seen),
//! and the first `count` GETs of one blob get the fault instead. Stopped
//! when dropped (a [`ServerThread`]).
use super::guards::ServerThread;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fault {
    /// Headers and half the body, then a TCP reset.
    ResetMidBlob,
    /// `503 Service Unavailable`.
    Status5xx,
    /// `429 Too Many Requests` with `Retry-After: <secs>`.
    TooMany(u64),
    /// Headers and half the body, then nothing (the connection stays open).
    Stall,
    /// Every manifest PUT refused as a registry that takes images only
    /// answers an OCI artifact: 400 MANIFEST_INVALID (`blob` unused).
    RejectManifests,
}

pub struct FaultProxy {
    pub port: u16,
    /// When each GET of the blob arrived, and whether it got the fault.
    pub hits: Arc<Mutex<Vec<(Instant, bool)>>>,
    /// The accepting thread, stopped when dropped.
    #[allow(dead_code)] // held for its drop
    server: ServerThread,
}

impl FaultProxy {
    /// Proxy to `127.0.0.1:upstream`; the first `count` GETs of a path
    /// containing `blob` (its digest) get `fault`.
    pub fn start(upstream: u16, blob: &str, fault: Fault, count: usize) -> FaultProxy {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        let port = l.local_addr().unwrap().port();
        let hits: Arc<Mutex<Vec<(Instant, bool)>>> = Arc::default();
        let left = Arc::new(AtomicUsize::new(count));
        let (h, blob) = (hits.clone(), blob.to_string());
        let server = ServerThread::spawn(move |s| {
            while !s.load(Ordering::Relaxed) {
                match l.accept() {
                    Ok((c, _)) => {
                        let (s, h, left, blob) = (s.clone(), h.clone(), left.clone(), blob.clone());
                        std::thread::spawn(move || serve(c, upstream, &blob, fault, &left, &h, &s));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        FaultProxy { port, hits, server }
    }

    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

fn read_head(c: &mut TcpStream) -> Option<Vec<u8>> {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if c.read(&mut b).ok()? == 0 {
            return None;
        }
        head.push(b[0]);
    }
    Some(head)
}

fn reset(c: &TcpStream) {
    let l = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt on a socket we own, with a valid linger struct.
    unsafe {
        libc::setsockopt(
            c.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&l as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as u32,
        );
    }
}

fn serve(
    mut c: TcpStream,
    upstream: u16,
    blob: &str,
    fault: Fault,
    left: &AtomicUsize,
    hits: &Mutex<Vec<(Instant, bool)>>,
    stop: &AtomicBool,
) {
    // containers/image tries HTTPS first even for an --insecure registry
    // and falls back to plain HTTP only once the TLS handshake fails. Answer
    // a TLS ClientHello (record type 0x16) as Go's plain HTTP server does,
    // at once; waiting for an HTTP head that never comes made each
    // connection sit out skopeo's 10 s TLS handshake timeout.
    let mut first = [0u8; 1];
    if c.peek(&mut first).ok() == Some(1) && first[0] == 0x16 {
        let _ = c.write_all(
            b"HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n",
        );
        return;
    }
    let Some(head) = read_head(&mut c) else {
        return;
    };
    let text = String::from_utf8_lossy(&head).into_owned();
    let first = text.lines().next().unwrap_or("").to_string();
    if matches!(fault, Fault::RejectManifests)
        && first.starts_with("PUT ")
        && first.contains("/manifests/")
    {
        let body = r#"{"errors":[{"code":"MANIFEST_INVALID","message":"manifest invalid","detail":"unsupported manifest media type and/or artifactType"}]}"#;
        let _ = write!(
            c,
            "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        return;
    }
    let is_blob = first.starts_with("GET ") && first.contains(blob);
    let faulted = is_blob
        && left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
    if is_blob {
        hits.lock().unwrap().push((Instant::now(), faulted));
    }
    match (faulted, fault) {
        (true, Fault::Status5xx) => {
            let _ = c.write_all(
                b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
            return;
        }
        (true, Fault::TooMany(s)) => {
            let _ = write!(
                c,
                "HTTP/1.1 429 Too Many Requests\r\nRetry-After: {s}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
            return;
        }
        _ => {}
    }
    // Forward, one request per connection.
    let mut req: String = text
        .split("\r\n")
        .filter(|l| !l.to_ascii_lowercase().starts_with("connection:"))
        .take_while(|l| !l.is_empty())
        .map(|l| format!("{l}\r\n"))
        .collect();
    req.push_str("Connection: close\r\n\r\n");
    let Ok(mut u) = TcpStream::connect(("127.0.0.1", upstream)) else {
        return;
    };
    if u.write_all(req.as_bytes()).is_err() {
        return;
    }
    let mut resp = Vec::new();
    let _ = u.read_to_end(&mut resp);
    if !faulted {
        let _ = c.write_all(&resp);
        let _ = c.shutdown(Shutdown::Write);
        return;
    }
    // Headers and half the body.
    let body_at = resp
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or(resp.len(), |i| i + 4);
    let cut = body_at + (resp.len() - body_at) / 2;
    let _ = c.write_all(&resp[..cut]);
    let _ = c.flush();
    match fault {
        Fault::Stall => {
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        _ => reset(&c),
    }
}
