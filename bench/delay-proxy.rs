//! The test harness's delay proxy (tests/common/delay.rs) as a program for bench/
//! scripts, built by bench/lib.sh with rustc alone (standard library only):
//!
//!   delay-proxy LISTEN_PORT TARGET_PORT ONE_WAY_MS
//!
//! Listens on 127.0.0.1:LISTEN_PORT (0: a free port), forwards to 127.0.0.1:TARGET_PORT
//! holding every byte ONE_WAY_MS milliseconds each way; prints the port it listens on,
//! then runs until killed.

#[path = "../tests/common/delay.rs"]
mod delay;

fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let nums: Vec<u64> = a.iter().filter_map(|v| v.parse().ok()).collect();
    if a.len() != 3 || nums.len() != 3 || nums[0] > 65535 || nums[1] > 65535 || nums[1] == 0 {
        eprintln!("usage: delay-proxy LISTEN_PORT TARGET_PORT ONE_WAY_MS (ports on 127.0.0.1)");
        std::process::exit(2);
    }
    let to = std::net::SocketAddr::from(([127, 0, 0, 1], nums[1] as u16));
    let delay = std::time::Duration::from_millis(nums[2]);
    let p = match delay::DelayProxy::start_on(nums[0] as u16, to, delay) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("delay-proxy: cannot listen on 127.0.0.1:{}: {e}", nums[0]);
            std::process::exit(1);
        }
    };
    println!("{}", p.port);
    loop {
        std::thread::park();
    }
}
