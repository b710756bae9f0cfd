//! The control file (`global/pg_control`, ControlFileData) as far as a delta restore
//! needs it: whose cluster, its state, and where its last checkpoint's redo starts.
//! The offsets read are the same in PostgreSQL 12-18; the CRC32C that ends the struct
//! is found by its own check, so a torn or foreign file is refused, not misread.

use super::format_lsn;

/// ControlFileData's `state` (DBState).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    Startup,
    ShutDown,
    ShutDownInRecovery,
    ShuttingDown,
    InCrashRecovery,
    InArchiveRecovery,
    InProduction,
}

impl State {
    fn of(v: u32) -> Option<State> {
        use State::*;
        [
            Startup,
            ShutDown,
            ShutDownInRecovery,
            ShuttingDown,
            InCrashRecovery,
            InArchiveRecovery,
            InProduction,
        ]
        .get(v as usize)
        .copied()
    }

    /// pg_controldata's words for it.
    pub fn words(self) -> &'static str {
        match self {
            State::Startup => "starting up",
            State::ShutDown => "shut down",
            State::ShutDownInRecovery => "shut down in recovery",
            State::ShuttingDown => "shutting down",
            State::InCrashRecovery => "in crash recovery",
            State::InArchiveRecovery => "in archive recovery",
            State::InProduction => "in production",
        }
    }
}

/// What a control file says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Control {
    pub system_identifier: u64,
    pub state: State,
    /// The last checkpoint record's position.
    pub checkpoint: u64,
    /// Its redo point: every page change before it is on disk.
    pub redo: u64,
    /// The timeline the checkpoint was written on.
    pub timeline: u32,
    /// A cluster in recovery: every page on disk is older than this point.
    pub min_recovery_point: u64,
    pub min_recovery_timeline: u32,
}

/// Offsets in ControlFileData (8-byte aligned fields, CheckPoint 88 bytes long).
const STATE: usize = 16;
const CHECKPOINT: usize = 32;
const REDO: usize = 40;
const TIMELINE: usize = 48;
const MIN_RECOVERY_POINT: usize = 136;
const MIN_RECOVERY_TLI: usize = 144;
/// Where the CRC may lie: after the fields above, before PG_CONTROL_MAX_SAFE_SIZE.
const CRC_FROM: usize = 200;
const CRC_TO: usize = 508;

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// Parses a control file's bytes; the error says what is wrong with them.
pub fn parse(b: &[u8]) -> Result<Control, String> {
    if b.len() < CRC_TO + 4 {
        return Err(format!(
            "it is {} bytes, a control file at least {}",
            b.len(),
            CRC_TO + 4
        ));
    }
    // The CRC32C of everything before it, at a 4-byte aligned offset.
    let crc_ok = (CRC_FROM..=CRC_TO)
        .step_by(4)
        .any(|at| crc32c::crc32c(&b[..at]) == u32_at(b, at));
    if !crc_ok {
        return Err(
            "its CRC does not match: it is damaged, or not a PostgreSQL 12-18 control file".into(),
        );
    }
    let state = u32_at(b, STATE);
    let state = State::of(state).ok_or_else(|| format!("its state {state} is unknown"))?;
    let c = Control {
        system_identifier: u64_at(b, 0),
        state,
        checkpoint: u64_at(b, CHECKPOINT),
        redo: u64_at(b, REDO),
        timeline: u32_at(b, TIMELINE),
        min_recovery_point: u64_at(b, MIN_RECOVERY_POINT),
        min_recovery_timeline: u32_at(b, MIN_RECOVERY_TLI),
    };
    if c.timeline == 0 || c.redo > c.checkpoint {
        return Err(format!(
            "its checkpoint at {} (redo {}, timeline {}) is not one PostgreSQL writes",
            format_lsn(c.checkpoint),
            format_lsn(c.redo),
            c.timeline
        ));
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn control(crc_at: usize) -> Vec<u8> {
        let mut b = vec![0u8; 8192];
        b[..8].copy_from_slice(&7301234567890123456u64.to_le_bytes());
        b[STATE..STATE + 4].copy_from_slice(&1u32.to_le_bytes());
        b[CHECKPOINT..CHECKPOINT + 8].copy_from_slice(&0x300_0060u64.to_le_bytes());
        b[REDO..REDO + 8].copy_from_slice(&0x300_0028u64.to_le_bytes());
        b[TIMELINE..TIMELINE + 4].copy_from_slice(&2u32.to_le_bytes());
        let crc = crc32c::crc32c(&b[..crc_at]);
        b[crc_at..crc_at + 4].copy_from_slice(&crc.to_le_bytes());
        b
    }

    #[test]
    fn reads_the_fields_and_checks_the_crc() {
        let c = parse(&control(296)).unwrap();
        assert_eq!(c.system_identifier, 7301234567890123456);
        assert_eq!(c.state, State::ShutDown);
        assert_eq!(
            (c.checkpoint, c.redo, c.timeline),
            (0x300_0060, 0x300_0028, 2)
        );
        let mut bad = control(296);
        bad[REDO] ^= 1;
        assert!(parse(&bad).unwrap_err().contains("CRC"));
        assert!(parse(&bad[..100]).is_err());
        let mut state = control(296);
        state[STATE] = 9;
        let crc = crc32c::crc32c(&state[..296]);
        state[296..300].copy_from_slice(&crc.to_le_bytes());
        assert!(parse(&state).unwrap_err().contains("state 9"));
    }
}
