//! Every call into the kernel or the C library, wrapped once here with the reason it is
//! sound. `rustix` where it offers the call (a safe API); `libc` where it does not.
//! Callers hold no `unsafe` of their own for these calls.

use std::io::{self, IoSliceMut};
use std::num::NonZeroU64;
use std::os::fd::AsFd;
use std::path::Path;

/// `O_DIRECT` for `OpenOptionsExt::custom_flags`.
pub const O_DIRECT: i32 = libc::O_DIRECT;

/// Opens that must not follow a link in the last component (a planted or swapped link
/// would redirect the read or write), nor wait on a FIFO.
pub const O_NOFOLLOW: i32 = libc::O_NOFOLLOW | libc::O_NONBLOCK;

/// Opens `path` to read, refusing anything but a regular file without waiting on it:
/// a FIFO would block the open (and every read) until a writer came. NotFound stays
/// NotFound (callers treat absence apart); a file of another kind is InvalidInput,
/// naming the path and what it is.
pub fn open_regular(path: &Path) -> io::Result<std::fs::File> {
    open_checked(path, rustix::fs::OFlags::RDONLY)
}

/// As `open_regular`, to read and write in place, not following a link in the last
/// component.
pub fn open_regular_rw(path: &Path) -> io::Result<std::fs::File> {
    use rustix::fs::OFlags;
    open_checked(path, OFlags::RDWR | OFlags::NOFOLLOW)
}

/// As `open_regular`, not following a link in the last component (a file of a
/// checked directory: see `private_dir`).
pub fn open_regular_nofollow(path: &Path) -> io::Result<std::fs::File> {
    use rustix::fs::OFlags;
    open_checked(path, OFlags::RDONLY | OFlags::NOFOLLOW)
}

/// Writes `bytes` as file `path` (made, or emptied first), never through a link in the
/// last component nor into anything but a regular file.
pub fn write_nofollow(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use rustix::fs::{FileType, Mode, OFlags};
    use std::io::Write;
    let flags =
        OFlags::WRONLY | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let fd = rustix::fs::open(path, flags, Mode::from_raw_mode(0o600))?;
    if FileType::from_raw_mode(rustix::fs::fstat(&fd)?.st_mode) != FileType::RegularFile {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("'{}' is not a regular file", path.display()),
        ));
    }
    let mut f = std::fs::File::from(fd);
    f.set_len(0)?;
    f.write_all(bytes)
}

fn open_checked(path: &Path, flags: rustix::fs::OFlags) -> io::Result<std::fs::File> {
    use rustix::fs::{FileType, Mode, OFlags};
    let fd = rustix::fs::open(
        path,
        flags | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY,
        Mode::empty(),
    )?;
    let kind = FileType::from_raw_mode(rustix::fs::fstat(&fd)?.st_mode);
    if kind != FileType::RegularFile {
        let what = match kind {
            FileType::Fifo => "a FIFO",
            FileType::Directory => "a directory",
            FileType::Socket => "a socket",
            FileType::CharacterDevice => "a character device",
            FileType::BlockDevice => "a block device",
            FileType::Symlink => "a symbolic link",
            _ => "of an unknown kind",
        };
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("'{}' is {what}, not a regular file", path.display()),
        ));
    }
    // Reads of a regular file then block as usual.
    let fl = rustix::fs::fcntl_getfl(&fd)?;
    rustix::fs::fcntl_setfl(&fd, fl - OFlags::NONBLOCK)?;
    Ok(fd.into())
}

/// Makes the process not dumpable (no core dump, no ptrace or /proc/PID/mem by its
/// user): called once a key is loaded, so no copy of it leaves the process that way.
pub fn not_dumpable() -> io::Result<()> {
    use rustix::process::DumpableBehavior;
    Ok(rustix::process::set_dumpable_behavior(
        DumpableBehavior::NotDumpable,
    )?)
}

/// Whether process `pid` exists: kill(pid, 0) succeeds, or fails only for want of
/// permission (another user's process). 0 and negative numbers name groups: never alive.
pub fn process_alive(pid: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    let Some(pid) = rustix::process::Pid::from_raw(pid) else {
        return false;
    };
    match rustix::process::test_kill_process(pid) {
        Ok(()) => true,
        Err(e) => e == rustix::io::Errno::PERM,
    }
}

/// This machine's name (uname's nodename), as a running backup records it.
pub fn hostname() -> String {
    rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned()
}

/// Takes an exclusive advisory lock (flock) on `f` without waiting: Ok(false) when
/// another open file description holds it. Released when `f` is closed.
pub fn try_lock(f: &std::fs::File) -> io::Result<bool> {
    use rustix::fs::FlockOperation;
    match rustix::fs::flock(f, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(true),
        Err(e) if e == rustix::io::Errno::WOULDBLOCK => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Opens (creating it) the lock file `p` and takes its lock without waiting: None when
/// another process holds it. A regular file only: a link planted there is not followed
/// (nothing is created through it), a FIFO does not block.
pub fn lock_file(p: &std::path::Path) -> io::Result<Option<std::fs::File>> {
    use rustix::fs::OFlags;
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .custom_flags((OFlags::NOFOLLOW | OFlags::NONBLOCK).bits() as i32)
        .open(p)?;
    if !f.metadata()?.is_file() {
        return Err(io::Error::other(format!(
            "'{}' is not a regular file",
            p.display()
        )));
    }
    Ok(try_lock(&f)?.then_some(f))
}

/// Lowers this process's CPU priority to `nice` (a background worker yields the cores to
/// the server and to the commands it waits on).
pub fn lower_priority(nice: i32) -> io::Result<()> {
    Ok(rustix::process::setpriority_process(None, nice)?)
}

/// Whether the process runs as root (effective uid 0).
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// The mask for every file and directory this process creates: private (0600/0700),
/// or readable by the group (0640/0750) as PostgreSQL's group access.
pub fn private_umask(group_read: bool) {
    use rustix::fs::Mode;
    let mask = if group_read {
        Mode::from_raw_mode(0o027)
    } else {
        Mode::from_raw_mode(0o077)
    };
    rustix::process::umask(mask);
}

pub fn is_einval(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::EINVAL)
}

pub fn is_enospc(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::ENOSPC)
}

/// The most files the process may hold open (its soft RLIMIT_NOFILE), as text.
pub fn open_files_limit() -> String {
    match rustix::process::getrlimit(rustix::process::Resource::Nofile).current {
        Some(n) => n.to_string(),
        None => "unlimited".into(),
    }
}

/// The process (EMFILE) or the system (ENFILE) has no file descriptor left.
pub fn is_out_of_descriptors(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
}

/// The first `len` bytes of a file, mapped read-only (and populated: one call maps
/// what the page cache holds).
pub fn map_file(f: &std::fs::File, len: u64) -> io::Result<memmap2::Mmap> {
    let len = usize::try_from(len).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: a WAL segment handed to archive_command, or waiting for it (.ready), is
    // complete: PostgreSQL neither writes, truncates nor recycles it until it is archived. A file cut short by
    // someone else raises SIGBUS (the push fails); it cannot make us read other memory.
    unsafe { memmap2::MmapOptions::new().len(len).populate().map(f) }
}

/// Page cache advice for a range; `len` 0 means to the end of the file.
#[derive(Clone, Copy)]
pub enum Advice {
    Sequential,
    Random,
    DontNeed,
    /// Start reading the range into the page cache now, without waiting.
    WillNeed,
}

/// posix_fadvise. Advice only: a failure changes nothing that matters, so it is ignored.
pub fn fadvise(fd: impl AsFd, offset: u64, len: u64, advice: Advice) {
    use rustix::fs::Advice as A;
    let advice = match advice {
        Advice::Sequential => A::Sequential,
        Advice::Random => A::Random,
        Advice::DontNeed => A::DontNeed,
        Advice::WillNeed => A::WillNeed,
    };
    let _ = rustix::fs::fadvise(fd, offset, NonZeroU64::new(len), advice);
}

/// sync_file_range(SYNC_FILE_RANGE_WRITE): starts writeback of a range without waiting.
/// Advice only: a failure shows up in the fsync that follows.
pub fn start_writeback(fd: impl AsFd, offset: u64, len: u64) {
    use std::os::fd::AsRawFd;
    // SAFETY: plain syscall on a descriptor the borrow keeps open; no memory passed.
    // (rustix has no sync_file_range.)
    unsafe {
        libc::sync_file_range(
            fd.as_fd().as_raw_fd(),
            offset as libc::off64_t,
            len as libc::off64_t,
            libc::SYNC_FILE_RANGE_WRITE,
        );
    }
}

/// syncfs: makes every file of the file system holding `fd` durable.
pub fn syncfs(fd: impl AsFd) -> io::Result<()> {
    Ok(rustix::fs::syncfs(fd)?)
}

/// preadv: one read at `offset` into several buffers; the bytes read.
pub fn preadv(fd: impl AsFd, bufs: &mut [IoSliceMut<'_>], offset: u64) -> io::Result<usize> {
    Ok(rustix::io::preadv(fd, bufs, offset)?)
}

/// fallocate: allocates `len` bytes from 0 (unwritten extents, read as zeros), the size
/// set too; an error where the file system cannot (never a fallback that writes zeros).
pub fn allocate(fd: impl AsFd, len: u64) -> io::Result<()> {
    use rustix::fs::FallocateFlags;
    Ok(rustix::fs::fallocate(fd, FallocateFlags::empty(), 0, len)?)
}

/// fallocate PUNCH_HOLE: frees `len` bytes at `offset` (they read as zeros), the size kept.
pub fn punch_hole(fd: impl AsFd, offset: u64, len: u64) -> io::Result<()> {
    use rustix::fs::FallocateFlags;
    let how = FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE;
    Ok(rustix::fs::fallocate(fd, how, offset, len)?)
}

/// posix_fallocate: reserves `len` bytes from 0 (glibc writes zeros where the file system
/// cannot allocate; rustix's fallocate does not).
pub fn posix_fallocate(fd: impl AsFd, len: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: plain call on a descriptor the borrow keeps open; no memory passed.
    match unsafe { libc::posix_fallocate(fd.as_fd().as_raw_fd(), 0, len as libc::off_t) } {
        0 => Ok(()),
        rc => Err(io::Error::from_raw_os_error(rc)),
    }
}

/// Pages of a file in the page cache, and how many of them are dirty or under
/// writeback (cachestat, Linux 6.5+).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cached {
    pub pages: u64,
    pub dirty: u64,
}

/// cachestat(2) over the whole file. None where the kernel lacks the call.
pub fn cached(fd: impl AsFd) -> Option<Cached> {
    use std::os::fd::AsRawFd;
    #[repr(C)]
    struct Range {
        off: u64,
        len: u64,
    }
    #[repr(C)]
    #[derive(Default)]
    struct Stat {
        nr_cache: u64,
        nr_dirty: u64,
        nr_writeback: u64,
        nr_evicted: u64,
        nr_recently_evicted: u64,
    }
    // The same number on every architecture (the unified table); libc does not name it.
    const SYS_CACHESTAT: libc::c_long = 451;
    let range = Range { off: 0, len: 0 };
    let mut st = Stat::default();
    // SAFETY: the kernel reads `range` and writes `st`, both live, sized and laid out as
    // its structs; the descriptor is kept open by the borrow.
    let rc = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            fd.as_fd().as_raw_fd(),
            &range as *const Range,
            &mut st as *mut Stat,
            0u32,
        )
    };
    (rc == 0).then_some(Cached {
        pages: st.nr_cache,
        dirty: st.nr_dirty + st.nr_writeback,
    })
}

/// The kernel's page size (what cachestat counts in).
pub fn page_size() -> u64 {
    rustix::param::page_size() as u64
}

/// Size of a transparent huge page (x86-64 and most others with 4 KiB pages).
pub const HUGE_PAGE: usize = 2 << 20;

/// Anonymous memory of `len` bytes starting on a huge page boundary, which the kernel is
/// asked to back with transparent huge pages: physically contiguous 2 MiB at a time, so
/// an O_DIRECT read into it is a few segments, not one per 4 KiB page. Only the huge
/// pages touched take memory. Returns the mapping and the aligned start's offset in it.
pub fn huge_memory(len: usize) -> io::Result<(memmap2::MmapMut, usize)> {
    let len = len.next_multiple_of(HUGE_PAGE);
    // One huge page more of address space (never touched) to find the boundary in.
    let map = memmap2::MmapMut::map_anon(len + HUGE_PAGE)?;
    let start = map.as_ptr().align_offset(HUGE_PAGE);
    // Advice only: without huge pages the memory works the same, with 4 KiB pages.
    let _ = map.advise_range(memmap2::Advice::HugePage, start, len);
    Ok((map, start))
}

/// Turns O_DIRECT on or off on an open file.
pub fn set_direct(fd: impl AsFd, on: bool) -> io::Result<()> {
    use rustix::fs::OFlags;
    let fd = fd.as_fd();
    let mut fl = rustix::fs::fcntl_getfl(fd)?;
    fl.set(OFlags::DIRECT, on);
    Ok(rustix::fs::fcntl_setfl(fd, fl)?)
}

/// statfs's f_type: the file system's magic number.
pub fn fs_type(path: &Path) -> Option<u64> {
    let st = rustix::fs::statfs(path).ok()?;
    #[allow(clippy::unnecessary_cast)]
    Some(st.f_type as i64 as u64 & 0xffff_ffff)
}

/// statvfs: (total blocks, bytes available to an unprivileged user).
pub fn fs_space(path: &Path) -> Option<(u64, u64)> {
    let st = rustix::fs::statvfs(path).ok()?;
    Some((st.f_blocks, st.f_bavail * st.f_frsize))
}

/// Bytes of RAM the machine has; 0 if unknown.
pub fn memory_total() -> u64 {
    let i = rustix::system::sysinfo();
    (i.totalram as u64).saturating_mul(i.mem_unit as u64)
}

/// Process CPU time (user + system, every thread) in seconds; 0 if unknown.
pub fn cpu_seconds() -> f64 {
    // SAFETY: rusage is plain data, valid zeroed; getrusage only writes into it.
    // (rustix has no getrusage.)
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return 0.0;
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// glibc's mallopt(M_MMAP_THRESHOLD): allocations from `bytes` up go to mmap.
pub fn set_mmap_threshold(bytes: i32) {
    // SAFETY: mallopt takes plain integers; called from main before any thread starts.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, bytes);
    }
}

/// The uid and gid of user `name`: Ok(None) when there is none, Err(errno) when the
/// lookup failed.
pub fn user_ids(name: &std::ffi::CStr) -> Result<Option<(u32, u32)>, io::Error> {
    let mut buf = vec![0 as libc::c_char; 16384];
    // SAFETY: `pwd` and `buf` outlive the call; getpwnam_r (unlike getpwnam) keeps its
    // strings in `buf`, so other threads cannot overwrite them. (rustix has no getpwnam.)
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    let rc = unsafe {
        libc::getpwnam_r(
            name.as_ptr(),
            &mut pwd,
            buf.as_mut_ptr(),
            buf.len(),
            &mut found,
        )
    };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok((!found.is_null()).then_some((pwd.pw_uid, pwd.pw_gid)))
}

/// Starts this binary again with `args`, detached: its own process group (a signal to
/// the caller's group does not reach it), stdin empty, stdout and stderr into `out` (or
/// nowhere). Returns its pid; it is not waited for.
pub fn spawn_detached<I, S>(args: I, out: Option<std::fs::File>) -> io::Result<u32>
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};
    let (stdout, stderr) = match out {
        Some(f) => (Stdio::from(f.try_clone()?), Stdio::from(f)),
        None => (Stdio::null(), Stdio::null()),
    };
    let child = Command::new(std::env::current_exe()?)
        .args(args)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .process_group(0)
        .spawn()?;
    Ok(child.id())
}

/// The groups of user `name` whose primary group is `gid` (its own and those that list
/// it), as a login or a service manager gives them.
fn group_list(name: &std::ffi::CStr, gid: u32) -> io::Result<Vec<u32>> {
    let mut n: libc::c_int = 32;
    loop {
        let mut groups = vec![0 as libc::gid_t; n as usize];
        let asked = n;
        // SAFETY: `groups` holds `n` entries; getgrouplist writes at most that many and
        // sets `n` to the count (or to what it needs when it returns -1).
        let rc = unsafe { libc::getgrouplist(name.as_ptr(), gid, groups.as_mut_ptr(), &mut n) };
        if rc >= 0 {
            groups.truncate(n as usize);
            return Ok(groups);
        }
        if n <= asked {
            n = asked * 2;
        }
        if n > 65536 {
            return Err(io::Error::other("the user belongs to too many groups"));
        }
    }
}

/// Makes `cmd` run as user `name` (`uid`, `gid`): its groups, its HOME, USER and
/// LOGNAME, as a server started under that user runs the commands it is given. Only
/// root may switch; the switch fails the spawn when it is refused.
pub fn run_as(cmd: &mut std::process::Command, name: &str, uid: u32, gid: u32) -> io::Result<()> {
    use std::os::unix::process::CommandExt;
    let c = std::ffi::CString::new(name).map_err(io::Error::other)?;
    let groups: Vec<rustix::fs::Gid> = (group_list(&c, gid)?.into_iter())
        .map(rustix::fs::Gid::from_raw)
        .collect();
    cmd.env("USER", name).env("LOGNAME", name);
    if let Some((_, home)) = user_by_uid(uid) {
        cmd.env("HOME", home);
    }
    let (uid, gid) = (
        rustix::fs::Uid::from_raw(uid),
        rustix::fs::Gid::from_raw(gid),
    );
    // SAFETY: between fork and exec the closure makes system calls only (no allocation,
    // no lock): the groups first, then the group and the user, the user last.
    unsafe {
        cmd.pre_exec(move || {
            rustix::thread::set_thread_groups(&groups)?;
            rustix::thread::set_thread_res_gid(gid, gid, gid)?;
            rustix::thread::set_thread_res_uid(uid, uid, uid)?;
            Ok(())
        });
    }
    Ok(())
}

/// The name and home directory of the effective user (libpq's defaults for the user
/// to connect as and for `~/.pgpass`); None when the system knows no such user.
pub fn current_user() -> Option<(String, std::path::PathBuf)> {
    // SAFETY: geteuid cannot fail.
    user_by_uid(unsafe { libc::geteuid() })
}

/// The name and home directory of user `uid`; None when the system knows no such user.
pub fn user_by_uid(uid: u32) -> Option<(String, std::path::PathBuf)> {
    use std::os::unix::ffi::OsStrExt;
    let mut buf = vec![0 as libc::c_char; 16384];
    // SAFETY: as in `user_ids`: `pwd` and `buf` outlive the call and getpwuid_r keeps
    // its strings in `buf`.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    let rc = unsafe { libc::getpwuid_r(uid, &mut pwd, buf.as_mut_ptr(), buf.len(), &mut found) };
    if rc != 0 || found.is_null() || pwd.pw_name.is_null() || pwd.pw_dir.is_null() {
        return None;
    }
    // SAFETY: both are NUL-terminated strings inside `buf`, alive here.
    let (name, dir) = unsafe {
        (
            std::ffi::CStr::from_ptr(pwd.pw_name),
            std::ffi::CStr::from_ptr(pwd.pw_dir),
        )
    };
    Some((
        name.to_string_lossy().into_owned(),
        std::ffi::OsStr::from_bytes(dir.to_bytes()).into(),
    ))
}

/// Whether a file owned by `uid` may configure this process or hold its key: one of
/// root or of the effective user (as OpenSSH requires); another user could otherwise
/// choose where this process writes or swap its key.
pub fn trusted_owner(uid: u32) -> bool {
    uid == 0 || uid == rustix::process::geteuid().as_raw()
}

/// User `uid` as people read it: its name, else `uid N`.
pub fn user_name(uid: u32) -> String {
    user_by_uid(uid).map_or(format!("uid {uid}"), |(n, _)| n)
}

/// The effective user as people read it.
pub fn effective_user_name() -> String {
    user_name(rustix::process::geteuid().as_raw())
}

/// Signals and their dispositions (`interrupt`).
pub mod signal {
    pub const INT: i32 = libc::SIGINT;
    pub const TERM: i32 = libc::SIGTERM;
    pub const HUP: i32 = libc::SIGHUP;

    /// A disposition: the default, ignore, or a handler that does only
    /// async-signal-safe work. Built only from those or from what `set` returned.
    #[derive(Clone, Copy, PartialEq, Eq)]
    pub struct Disposition(libc::sighandler_t);

    pub const DEFAULT: Disposition = Disposition(libc::SIG_DFL);
    pub const IGNORE: Disposition = Disposition(libc::SIG_IGN);

    impl Disposition {
        /// # Safety
        /// `f` may do only async-signal-safe work (atomics, `set`).
        pub unsafe fn handler(f: extern "C" fn(i32)) -> Disposition {
            Disposition(f as libc::sighandler_t)
        }
    }

    /// signal(): installs `to` for `sig`, returns the disposition it replaced.
    pub fn set(sig: i32, to: Disposition) -> Disposition {
        // SAFETY: `to` is the default, ignore, a handler whose maker promised it is
        // async-signal-safe, or an earlier disposition; signal() is async-signal-safe.
        // (rustix offers sigaction only for runtimes, as unsafe.)
        Disposition(unsafe { libc::signal(sig, to.0) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_as_gives_the_user_its_ids_groups_and_home() {
        let Ok(Some((uid, gid))) = user_ids(c"postgres") else {
            return;
        };
        if !is_root() {
            return;
        }
        let mut c = std::process::Command::new("/bin/sh");
        c.args(["-c", "id -u; id -g; id -G; echo $HOME $USER"]);
        run_as(&mut c, "postgres", uid, gid).unwrap();
        let out = c.output().unwrap();
        assert!(out.status.success());
        let out = String::from_utf8(out.stdout).unwrap();
        let id = |a: &str| {
            let o = std::process::Command::new("id")
                .args([a, "postgres"])
                .output();
            String::from_utf8(o.unwrap().stdout)
                .unwrap()
                .trim()
                .to_string()
        };
        let home = user_by_uid(uid).unwrap().1;
        let want = format!("{uid}\n{gid}\n{}\n{} postgres\n", id("-G"), home.display());
        assert_eq!(out, want, "root's groups must not stay");
    }

    #[test]
    fn open_regular_refuses_a_fifo_at_once_and_keeps_not_found() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("f");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        let e = open_regular(&fifo).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(
            e.to_string().contains("is a FIFO, not a regular file"),
            "{e}"
        );
        let e = open_regular(dir.path()).unwrap_err();
        assert!(e.to_string().contains("is a directory"), "{e}");
        let gone = dir.path().join("gone");
        assert_eq!(
            open_regular(&gone).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
        let file = dir.path().join("r");
        std::fs::write(&file, b"abc").unwrap();
        let f = open_regular(&file).unwrap();
        let fl = rustix::fs::fcntl_getfl(&f).unwrap();
        assert!(!fl.contains(rustix::fs::OFlags::NONBLOCK));
        assert!(open_regular_rw(&file).is_ok());
    }

    #[test]
    fn not_dumpable_clears_the_flag() {
        use rustix::process::{dumpable_behavior, DumpableBehavior};
        not_dumpable().unwrap();
        assert_eq!(dumpable_behavior().unwrap(), DumpableBehavior::NotDumpable);
    }

    #[test]
    fn process_alive_tells_a_live_pid_from_an_ended_one() {
        assert!(process_alive(std::process::id() as i32));
        let mut c = std::process::Command::new("true").spawn().unwrap();
        let pid = c.id() as i32;
        c.wait().unwrap();
        assert!(!process_alive(pid));
        assert!(!process_alive(0) && !process_alive(-1));
    }
}
