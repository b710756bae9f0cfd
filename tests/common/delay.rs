//! A delay on the network: a TCP proxy on 127.0.0.1 that holds every byte a fixed time
//! in each direction, as a store in another zone answers, without limiting bandwidth:
//! what it reads it queues with the time it came, and a second thread per direction
//! writes each chunk once its time is due. A new connection's first bytes reach the
//! server one round trip late, as after a real TCP handshake (the one to the proxy is
//! local). Standard library only: bench/delay-proxy.rs builds it with rustc alone.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The proxy: listens on 127.0.0.1:`port`, forwards to `to` with `delay` each way.
pub struct DelayProxy {
    pub port: u16,
    pub delay: Duration,
    shared: Arc<Shared>,
    accept: Option<std::thread::JoinHandle<()>>,
}

struct Shared {
    to: SocketAddr,
    delay: Duration,
    stopped: AtomicBool,
    connections: AtomicU64,
    /// Both ends of every open connection, by number, to cut them when the proxy stops.
    open: Mutex<std::collections::HashMap<u64, Vec<TcpStream>>>,
}

impl DelayProxy {
    /// Starts a proxy on a free port of 127.0.0.1 to `to`, `delay` one way (zero: a
    /// plain relay, the same path through the proxy without the wait).
    pub fn start(to: SocketAddr, delay: Duration) -> DelayProxy {
        Self::start_on(0, to, delay).expect("start the delay proxy")
    }

    /// Starts it on `port` (0: a free one).
    pub fn start_on(port: u16, to: SocketAddr, delay: Duration) -> std::io::Result<DelayProxy> {
        let l = TcpListener::bind(("127.0.0.1", port))?;
        let port = l.local_addr()?.port();
        let shared = Arc::new(Shared {
            to,
            delay,
            stopped: AtomicBool::new(false),
            connections: AtomicU64::new(0),
            open: Mutex::new(Default::default()),
        });
        let s = shared.clone();
        let accept = std::thread::spawn(move || {
            for c in l.incoming() {
                if s.stopped.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(c) = c else { continue };
                let id = s.connections.fetch_add(1, Ordering::SeqCst);
                let s = s.clone();
                std::thread::spawn(move || {
                    relay(&s, id, c);
                    s.open.lock().unwrap().remove(&id);
                });
            }
        });
        Ok(DelayProxy {
            port,
            delay,
            shared,
            accept: Some(accept),
        })
    }

    /// The proxy's address as an http:// endpoint.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Connections accepted so far (each one a client reaching for the server).
    pub fn connections(&self) -> u64 {
        self.shared.connections.load(Ordering::SeqCst)
    }

    /// Stops listening and cuts every connection: the server behind is unreachable
    /// through it from now on (a connection is refused).
    pub fn stop(&mut self) {
        if self.shared.stopped.swap(true, Ordering::SeqCst) {
            return;
        }
        // Wakes the accept loop, which then sees `stopped` and drops the listener.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
        for (_, ends) in self.shared.open.lock().unwrap().drain() {
            for c in ends {
                let _ = c.shutdown(Shutdown::Both);
            }
        }
    }
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        self.stop();
    }
}

fn relay(s: &Arc<Shared>, id: u64, client: TcpStream) {
    let accepted = Instant::now();
    let Ok(server) = TcpStream::connect_timeout(&s.to, Duration::from_secs(10)) else {
        let _ = client.shutdown(Shutdown::Both);
        return;
    };
    for c in [&client, &server] {
        let _ = c.set_nodelay(true);
        if let Ok(k) = c.try_clone() {
            s.open.lock().unwrap().entry(id).or_default().push(k);
        }
    }
    if s.stopped.load(Ordering::SeqCst) {
        let _ = client.shutdown(Shutdown::Both);
        let _ = server.shutdown(Shutdown::Both);
        return;
    }
    // What the client sends first waits for the handshake a real network makes.
    let first = accepted + 2 * s.delay;
    let (c2, s2) = match (client.try_clone(), server.try_clone()) {
        (Ok(c), Ok(v)) => (c, v),
        _ => return,
    };
    let d = s.delay;
    let up = std::thread::spawn(move || pump(c2, s2, d, Some(first)));
    pump(server, client, d, None);
    let _ = up.join();
}

/// Copies `from` to `to`, each chunk written `delay` after it was read (never before
/// `not_before` + `delay`); EOF passed on as a half close, after the same delay.
fn pump(mut from: TcpStream, mut to: TcpStream, delay: Duration, not_before: Option<Instant>) {
    let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>();
    let writer = {
        let mut to2 = match to.try_clone() {
            Ok(t) => t,
            Err(_) => return,
        };
        std::thread::spawn(move || {
            for (at, chunk) in rx {
                let now = Instant::now();
                if at > now {
                    std::thread::sleep(at - now);
                }
                if chunk.is_empty() {
                    let _ = to2.shutdown(Shutdown::Write);
                    return;
                }
                if to2.write_all(&chunk).is_err() {
                    let _ = to2.shutdown(Shutdown::Both);
                    return;
                }
            }
        })
    };
    let mut buf = vec![0u8; 256 << 10];
    loop {
        let n = match from.read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => 0,
        };
        let now = Instant::now();
        let at = not_before.map_or(now, |t| t.max(now)) + delay;
        // An empty chunk is the end: a half close once it is due.
        if tx.send((at, buf[..n].to_vec())).is_err() || n == 0 {
            break;
        }
    }
    drop(tx);
    let _ = writer.join();
    let _ = from.shutdown(Shutdown::Read);
    let _ = to.flush();
}
