//! Wait statistics as the CLI shows them: the engine's figures, the table and advice
//! about the bottleneck in the CLI's terms (the engine never prints).

use crate::engine::stats::WaitStats;
use serde::ser::{Serialize, SerializeStruct, Serializer};

/// What the bottleneck means and what helps, in terms of the command's options.
pub fn advice(bottleneck: &str) -> String {
    match bottleneck {
        "read" => "the source storage: reads took most of the time; more readers or a faster volume help, compression and devices were waiting".to_string(),
        "compress" => "the CPU: compression and checksums kept their threads busiest; more --threads help, and a lighter codec when compressing".to_string(),
        "write" => "the destination: device writes took most of the time; more stripes or faster devices help".to_string(),
        "decompress" => "the CPU: decompression and checksums kept the threads busiest".to_string(),
        other => format!("the {other} stage"),
    }
}

/// The `waits` object of the commands' JSON: the figures and the advice, in the order
/// the output has always had.
impl Serialize for WaitStats {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("WaitStats", 3)?;
        st.serialize_field("stages", &self.stages)?;
        st.serialize_field("bottleneck", &self.bottleneck)?;
        st.serialize_field("explanation", &advice(&self.bottleneck))?;
        st.end()
    }
}

/// `waits.print()` for the commands: the table and the bottleneck on stdout.
pub trait PrintWaits {
    fn print(&self);
}

impl PrintWaits for WaitStats {
    fn print(&self) {
        println!("Wait statistics:");
        println!(
            "  {:<11} {:>7} {:>9} {:>12} {:>13} {:>6}",
            "stage", "threads", "busy s", "wait input s", "wait output s", "util"
        );
        for st in &self.stages {
            println!(
                "  {:<11} {:>7} {:>9.3} {:>12.3} {:>13.3} {:>5.0}%",
                st.stage,
                st.threads,
                st.busy_seconds,
                st.wait_input_seconds,
                st.wait_output_seconds,
                st.utilization * 100.0
            );
        }
        println!(
            "Bottleneck: {} ({})",
            self.bottleneck,
            advice(&self.bottleneck)
        );
    }
}
