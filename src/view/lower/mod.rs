//! What the view does only as a workspace's lower layer (`/run/ckptfs/<id>/lower` and
//! `lower-bare`, which `workspace::lower` mounts through the daemons): [`warm`] lists a
//! checkpoint root in the background when an overlay is about to stack on it, so the kernel
//! holds every dentry before `git status` asks; [`bare`] serves roots without any xattr and
//! answers GETXATTR with ENOSYS, so overlayfs stops asking. The pins every view holds are
//! [`super::pin`]'s.

pub mod bare;
pub mod warm;
