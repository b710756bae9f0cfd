# Sourced by the benchmarks. Some VMs (this one: virtio-balloon with free page reporting) hand
# the memory the guest frees back to the host; touching it again then costs the guest a host
# fault per page: about 4 us per 4 KiB page here, 1 s per GB of page cache. A restore after a
# delete or drop_caches paid it or not depending on the run before, whatever the tool (sys time
# 1.0 s or 4.6 s for the same 1.1 GB restore). hold_guest_memory stops the reporting and touches
# the free memory once, so every run meets memory the host already backs;
# release_guest_memory (call it from the EXIT trap) puts the setting back. Both log to stderr;
# VM_MEMORY_NOTE says what was done, for a report's header.
VM_REPORTING=/sys/module/page_reporting/parameters/page_reporting_order
VM_REPORTING_OLD=""
VM_MEMORY_NOTE="free page reporting: none found (memory stays with the guest)"

hold_guest_memory() {
    _hold_guest_memory
    printf '[%s] %s\n' "$(date +%T)" "$VM_MEMORY_NOTE" >&2
}

_hold_guest_memory() {
    [ -e "$VM_REPORTING" ] || return 0
    if ! VM_REPORTING_OLD=$(cat "$VM_REPORTING") || ! echo 11 > "$VM_REPORTING" 2>/dev/null; then
        VM_REPORTING_OLD=""
        VM_MEMORY_NOTE="free page reporting is on and could not be stopped: runs after a delete may pay host faults"
        return 0
    fi
    # Order 11 is above the largest free block (order 10): nothing is reported any more.
    local mib t0=$SECONDS
    mib=$(awk '/MemAvailable/ {print int($2 / 1024) - 1024}' /proc/meminfo)
    python3 - "$mib" <<'PY'
import mmap, sys
n = int(sys.argv[1]) << 20
m = mmap.mmap(-1, n)
one = b"\1" * (1 << 20)
for i in range(0, n, 1 << 20):
    m[i:i + (1 << 20)] = one
PY
    VM_MEMORY_NOTE="free page reporting stopped while measuring (page_reporting_order $VM_REPORTING_OLD -> 11), $mib MiB of free memory touched first in $((SECONDS - t0)) s"
}

release_guest_memory() {
    [ -n "$VM_REPORTING_OLD" ] && echo "$VM_REPORTING_OLD" > "$VM_REPORTING" 2>/dev/null
    VM_REPORTING_OLD=""
}
