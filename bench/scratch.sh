# Sourced by pg.sh and objects.sh: fresh_scratch gives each case a new, empty directory
# SCRATCH under SCRATCH_ROOT (set by the script), after removing the last case's.
#
# On a journal-less ext4 (this VM's), every file created skips, one by one, each inode of
# its block group freed in the last 60-360 s (recently_deleted in fs/ext4/ialloc.c): once
# the last case's tree was removed, any tool paid 0.1-0.5 s of CPU to create the 1,300
# files of a restore, more the more trees had gone in the minutes before. The root is the
# top of a directory hierarchy (chattr +T), so ext4 places each case's directory by its
# new name in a group where nothing was just freed, as on a fresh volume. With a journal
# (or on XFS) there is no such cost, and elsewhere chattr just fails.
SCRATCH_CASES=0
fresh_scratch() {
    rm -rf "$SCRATCH_ROOT"
    mkdir -p "$SCRATCH_ROOT"
    chattr +T "$SCRATCH_ROOT" 2>/dev/null || true
    SCRATCH_CASES=$((SCRATCH_CASES + 1))
    SCRATCH=$SCRATCH_ROOT/case-$SCRATCH_CASES
    mkdir "$SCRATCH"
    chown postgres: "$SCRATCH_ROOT" "$SCRATCH"
}
