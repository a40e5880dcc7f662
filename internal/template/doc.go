// Package template produces the root filesystems that sandboxes are cloned
// from. The caller chooses the destination directory (the storage pool puts it
// on a btrfs subvolume and clones sandboxes from it); this package only fills
// it.
//
// Two kinds of template exist:
//
//   - A host template (BuildHost) holds a private, writable copy of the
//     host's /etc with every secret removed, the sandbox's own directories,
//     and empty mount points. Its big read-only parts (/usr, /opt, and on a
//     host without merged /usr also /bin, /sbin, /lib…) are bind-mounted
//     read-only from the host by the runtime at start; HostMounts lists them.
//   - An image template (ImportOCI) is the flattened root filesystem of an
//     OCI or Docker image, extracted through the confined extractor of
//     package files so that a hostile image cannot write outside the
//     destination.
//
// Both kinds follow the same sandbox conventions: the agent user is uid and
// gid 1000 with home /home/agent; /workspace, /data and /home/agent belong to
// it; /tmp and /var/tmp are 1777; /proc, /sys, /dev, /run and /.stead exist as
// mount points for the runtime.
package template
