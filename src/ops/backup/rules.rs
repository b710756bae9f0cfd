//! The backup's size and buffer rules, written once for the command line, T-SQL and
//! tune; and how the files of a source are planned over its volumes.

use super::*;
use crate::format::manifest::SourceKind;

/// A size setting's rule, for the command line (64K, 1M) and T-SQL (bytes).
pub struct SizeRule {
    pub what: &'static str,
    pub min: u64,
    pub max: u64,
    pub multiple_of: Option<u64>,
    pub power_of_two: bool,
}

/// Stripes a backup writes inside a repository (`--stripes`).
pub const REPO_STRIPES_MAX: u32 = 64;

/// MAXTRANSFERSIZE: 64 KiB to 16 MiB in steps of 64 KiB (as SQL Server).
pub const TRANSFER_SIZE: SizeRule = SizeRule {
    what: "max transfer size",
    min: crate::format::TRANSFER_MIN as u64,
    max: crate::format::TRANSFER_MAX as u64,
    multiple_of: Some(64 << 10),
    power_of_two: false,
};

/// BLOCKSIZE: a power of two from 512 B to 1 MiB.
pub const BLOCK_SIZE: SizeRule = SizeRule {
    what: "block size",
    min: crate::format::media::MIN_BLOCK as u64,
    max: crate::format::BLOCK_MAX as u64,
    multiple_of: None,
    power_of_two: true,
};

impl SizeRule {
    pub fn allows(&self, v: u64) -> bool {
        (self.min..=self.max).contains(&v)
            && self.multiple_of.is_none_or(|m| v.is_multiple_of(m))
            && (!self.power_of_two || v.is_power_of_two())
    }

    /// Parses a size as the command line writes it and checks it.
    pub fn parse(&self, s: &str) -> Result<u64, String> {
        let v = units::parse_in_range(s, self.min, self.max, self.what, self.power_of_two)?;
        match self.multiple_of {
            Some(m) if !v.is_multiple_of(m) => Err(format!(
                "{} {v} must be a multiple of {} ({}..{})",
                self.what,
                human(m),
                short(self.min),
                short(self.max)
            )),
            _ => Ok(v),
        }
    }

    /// What is allowed, in bytes (T-SQL's wording).
    pub fn in_bytes(&self) -> String {
        match self.multiple_of {
            Some(m) => format!("a multiple of {m} from {} to {}", self.min, self.max),
            None => format!("a power of two from {} to {}", self.min, self.max),
        }
    }
}

/// 64K, 16M: a size as the command line writes it.
fn short(n: u64) -> String {
    if n.is_multiple_of(1 << 20) {
        format!("{}M", n >> 20)
    } else if n.is_multiple_of(1 << 10) {
        format!("{}K", n >> 10)
    } else {
        n.to_string()
    }
}

/// clap's parser for --max-transfer-size.
pub fn parse_transfer_size(s: &str) -> Result<u64, String> {
    TRANSFER_SIZE.parse(s)
}

/// clap's parser for --block-size.
pub fn parse_block_size(s: &str) -> Result<u64, String> {
    BLOCK_SIZE.parse(s)
}

/// SQL Server's default BUFFERCOUNT: devices x (suggested I/O depth 3 + 1) + 2 x volumes.
pub fn sql_server_buffers(stripes: usize, volumes: usize) -> usize {
    stripes * 4 + 2 * volumes
}

/// The buffers that keep every read in flight, compressor and writer busy.
pub fn pipeline_min(reads_in_flight: usize, threads: usize, stripes: usize) -> usize {
    reads_in_flight + 2 * threads + 2 * stripes
}

/// Pool buffers that fit in `budget` beside the compression scratch buffers and the
/// devices' write buffers; an error naming what to change when too few for the first
/// `reads` in flight (every volume's `--readers x --read-depth`) and `stripes`.
pub fn within_budget(
    budget: u64,
    device_memory: u64,
    p: &Params,
    (reads, stripes): (usize, usize),
) -> Result<usize> {
    let each = p.buffer_footprint() as u64;
    // Compression scratch buffers are made as the pool's are.
    let fixed = device_memory + p.threads as u64 * each;
    let fit = (budget.saturating_sub(fixed) / each) as usize;
    let least = pipeline_min(reads, p.threads, stripes);
    if fit < least {
        bail!(
            "--memory-budget {} holds {fit} buffers of {} beside {} of compression scratch and \
             device write buffers; the backup needs at least {least} ({reads} reads in flight, \
             2 per compression thread and per stripe), {} in all: raise the budget, or lower \
             --read-depth, --threads or --max-transfer-size",
            human(budget),
            human(each),
            human(fixed),
            human(fixed + least as u64 * each)
        );
    }
    Ok(fit)
}

/// Memory of the pool plus one compression scratch buffer per thread.
pub fn buffer_memory(p: &Params) -> u64 {
    ((p.buffer_count + p.threads) * p.buffer_size()) as u64
}

/// Volumes seen so far: device id -> reader index, and a name for each.
#[derive(Default)]
pub struct Volumes {
    pub(super) index: HashMap<u64, usize>,
    pub names: Vec<PathBuf>,
}

impl Volumes {
    /// The reader index of `e`'s volume; a volume is named by the deepest directory
    /// holding all of its files (the database file itself for SQLite).
    fn of(&mut self, e: &SourceFile, kind: SourceKind) -> usize {
        let dir = if kind == SourceKind::Sqlite {
            PathBuf::from(&e.rel_path)
        } else {
            let dir = e.abs_path.dir();
            match dir.as_os_str().is_empty() {
                true => PathBuf::from("/"),
                false => dir.to_path_buf(),
            }
        };
        match self.index.get(&e.dev) {
            Some(&v) => {
                let name = &mut self.names[v];
                while !dir.starts_with(&*name) {
                    if !name.pop() {
                        break;
                    }
                }
                v
            }
            None => {
                self.names.push(dir);
                self.index.insert(e.dev, self.names.len() - 1);
                self.names.len() - 1
            }
        }
    }
}

/// The regular files of `entries` as engine input; ids are entry indexes plus `first_id`.
/// Each file's absolute path moves into the plan: the entries keep only the relative one.
pub fn plan_of(
    entries: &mut [SourceFile],
    first_id: usize,
    vols: &mut Volumes,
    kind: SourceKind,
) -> (Vec<ReadFile>, Vec<u32>) {
    let n = entries.iter().filter(|e| e.kind == EntryKind::File).count();
    let mut plan = Vec::with_capacity(n);
    let mut ids = Vec::with_capacity(n);
    for (i, e) in entries.iter_mut().enumerate() {
        if e.kind == EntryKind::File {
            let volume = vols.of(e, kind);
            // A directory shared, a short name inline: no memory of its own.
            let path = e.abs_path.clone();
            plan.push(ReadFile {
                missing_ok: e.missing_ok,
                ..ReadFile::new((first_id + i) as u32, path, e.size, volume)
            });
            ids.push((first_id + i) as u32);
        }
    }
    (plan, ids)
}
