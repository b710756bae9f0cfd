//! The test harness's delay proxy (tests/common/delay.rs, issue 55): what it adds to
//! each exchange, and that it counts connections.

mod common;

use std::time::{Duration, Instant};

/// The proxy holds bytes the time it was given each way, and a new connection's first
/// bytes one round trip more (the handshake); at 0 it only relays.
#[test]
fn the_delay_proxy_adds_its_round_trips() {
    use std::io::{Read, Write};
    let echo = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let to = echo.local_addr().unwrap();
    std::thread::spawn(move || {
        for c in echo.incoming() {
            let mut c = c.unwrap();
            std::thread::spawn(move || {
                let mut b = [0u8; 4096];
                while let Ok(n) = c.read(&mut b) {
                    if n == 0 || c.write_all(&b[..n]).is_err() {
                        return;
                    }
                }
            });
        }
    });
    for ms in [0u64, 25] {
        let p = common::delay::DelayProxy::start(to, Duration::from_millis(ms));
        let mut c = std::net::TcpStream::connect(("127.0.0.1", p.port)).unwrap();
        c.set_nodelay(true).unwrap();
        let mut times = vec![];
        for i in 0..3u8 {
            let t0 = Instant::now();
            c.write_all(&[i; 1000]).unwrap();
            let mut got = [0u8; 1000];
            c.read_exact(&mut got).unwrap();
            assert!(got.iter().all(|&b| b == i));
            times.push(t0.elapsed());
        }
        let rtt = Duration::from_millis(2 * ms);
        // The first exchange pays the handshake's round trip too.
        assert!(times[0] >= 2 * rtt, "{ms} ms: {times:?}");
        for t in &times[1..] {
            assert!(
                *t >= rtt && *t < rtt + Duration::from_millis(45),
                "{ms} ms: {times:?}"
            );
        }
        assert_eq!(p.connections(), 1);
    }
}
