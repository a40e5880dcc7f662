package guest

import (
	"fmt"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// deniedSyscalls fail with EPERM inside a sandbox: the kernel-administration
// and namespace-escape calls Docker's default profile also refuses. Most
// already fail for lack of capabilities; the filter is the second wall.
// ptrace and process_vm_readv/writev are allowed, as Docker allows them on
// kernels >= 4.8: every sandbox has its own user and pid namespaces, so a
// process can trace only its own processes inside (strace, gdb).
var deniedSyscalls = []uintptr{
	unix.SYS_ACCT, unix.SYS_ADD_KEY, unix.SYS_BPF, unix.SYS_CLOCK_ADJTIME,
	unix.SYS_CLOCK_SETTIME, unix.SYS_CREATE_MODULE, unix.SYS_DELETE_MODULE,
	unix.SYS_FINIT_MODULE, unix.SYS_GET_KERNEL_SYMS, unix.SYS_INIT_MODULE,
	unix.SYS_IOPERM, unix.SYS_IOPL, unix.SYS_KCMP, unix.SYS_KEXEC_FILE_LOAD,
	unix.SYS_KEXEC_LOAD, unix.SYS_KEYCTL, unix.SYS_LOOKUP_DCOOKIE, unix.SYS_MOUNT,
	unix.SYS_MOVE_MOUNT, unix.SYS_OPEN_TREE, unix.SYS_FSOPEN, unix.SYS_FSCONFIG,
	unix.SYS_FSMOUNT, unix.SYS_FSPICK, unix.SYS_MOUNT_SETATTR,
	unix.SYS_NAME_TO_HANDLE_AT, unix.SYS_OPEN_BY_HANDLE_AT, unix.SYS_PERF_EVENT_OPEN,
	unix.SYS_PIVOT_ROOT, unix.SYS_QUERY_MODULE, unix.SYS_QUOTACTL, unix.SYS_REBOOT,
	unix.SYS_REQUEST_KEY, unix.SYS_SETNS, unix.SYS_SETTIMEOFDAY, unix.SYS_SWAPON,
	unix.SYS_SWAPOFF, unix.SYS_SYSFS, unix.SYS__SYSCTL, unix.SYS_UMOUNT2,
	unix.SYS_UNSHARE, unix.SYS_USELIB, unix.SYS_USERFAULTFD, unix.SYS_USTAT,
	unix.SYS_NFSSERVCTL,
	// io_uring bypasses seccomp for the operations it performs.
	unix.SYS_IO_URING_SETUP, unix.SYS_IO_URING_ENTER, unix.SYS_IO_URING_REGISTER,
}

// deniedIoctls are the btrfs subvolume-creating requests
// (BTRFS_IOC_SNAP_CREATE, _SUBVOL_CREATE, _SNAP_CREATE_V2, _SUBVOL_CREATE_V2).
var deniedIoctls = []uint32{0x50009401, 0x5000940e, 0x50009417, 0x50009418}

// cloneNSFlags are the namespace flags a sandboxed clone may not pass.
const cloneNSFlags = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS |
	unix.CLONE_NEWIPC | unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET

const (
	seccompRetAllow = 0x7fff0000
	seccompRetErrno = 0x00050000
	seccompRetKill  = 0x80000000 // SECCOMP_RET_KILL_PROCESS
	auditArchX86_64 = 0xc000003e
	x32SyscallBit   = 0x40000000
)

// seccompProgram assembles the default filter. clone3 gets ENOSYS (not
// EPERM) so that libc falls back to clone, whose flags the filter can see.
func seccompProgram() ([]bpf.RawInstruction, error) {
	errno := func(e unix.Errno) bpf.Instruction { return bpf.RetConstant{Val: seccompRetErrno | uint32(e)} }
	prog := []bpf.Instruction{
		bpf.LoadAbsolute{Off: 4, Size: 4}, // seccomp_data.arch
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: auditArchX86_64, SkipTrue: 1},
		bpf.RetConstant{Val: seccompRetKill},
		bpf.LoadAbsolute{Off: 0, Size: 4}, // seccomp_data.nr
		bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: x32SyscallBit, SkipFalse: 1},
		errno(unix.EPERM),
	}
	for _, nr := range deniedSyscalls {
		prog = append(prog,
			bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: uint32(nr), SkipTrue: 1},
			errno(unix.EPERM))
	}
	// Subvolume creation would let an agent hide data from snapshots
	// (btrfs snapshots skip nested subvolumes).
	prog = append(prog,
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: unix.SYS_IOCTL, SkipTrue: uint8(2 + 2*len(deniedIoctls))},
		bpf.LoadAbsolute{Off: 24, Size: 4}, // args[1], low half: the request
	)
	for _, req := range deniedIoctls {
		prog = append(prog,
			bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: req, SkipTrue: 1},
			errno(unix.EPERM))
	}
	prog = append(prog,
		bpf.RetConstant{Val: seccompRetAllow},
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: unix.SYS_CLONE3, SkipTrue: 1},
		errno(unix.ENOSYS),
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: unix.SYS_CLONE, SkipTrue: 3},
		bpf.LoadAbsolute{Off: 16, Size: 4}, // args[0], low half: the flags
		bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: cloneNSFlags, SkipFalse: 1},
		errno(unix.EPERM),
		bpf.RetConstant{Val: seccompRetAllow},
	)
	return bpf.Assemble(prog)
}

// loadSeccomp installs the default filter on every thread of init; every
// process init starts inherits it. no_new_privs is already set by the
// runtime.
func loadSeccomp() error {
	raw, err := seccompProgram()
	if err != nil {
		return fmt.Errorf("assemble seccomp filter: %w", err)
	}
	filter := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		filter[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("set no_new_privs: %w", err)
	}
	_, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER,
		unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&prog)))
	if e != 0 {
		return fmt.Errorf("load seccomp filter: %w", e)
	}
	return nil
}
