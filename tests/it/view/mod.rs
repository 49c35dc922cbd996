mod inodes_git;
mod inodes_stable;
mod mount;
mod mount_helpers;
mod warm;
