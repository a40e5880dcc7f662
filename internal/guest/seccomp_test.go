package guest

import (
	"testing"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// run evaluates the filter on one syscall with the BPF VM.
func evalFilter(t *testing.T, nr uint32, args ...uint64) uint32 {
	t.Helper()
	raw, err := seccompProgram()
	if err != nil {
		t.Fatal(err)
	}
	insts, ok := bpf.Disassemble(raw)
	if !ok {
		t.Fatal("disassemble")
	}
	vm, err := bpf.NewVM(insts)
	if err != nil {
		t.Fatal(err)
	}
	// struct seccomp_data: nr, arch, instruction_pointer, args[6] (little endian).
	data := make([]byte, 64)
	put32 := func(off int, v uint32) {
		data[off], data[off+1], data[off+2], data[off+3] = byte(v>>24), byte(v>>16), byte(v>>8), byte(v)
	}
	// The BPF VM loads big-endian words; the kernel passes host order, so
	// the test writes big-endian to mean the same values.
	put32(0, nr)
	put32(4, auditArchX86_64)
	for i, a := range args {
		put32(16+8*i, uint32(a))
	}
	out, err := vm.Run(data)
	if err != nil {
		t.Fatal(err)
	}
	return uint32(out)
}

func TestSeccompFilterDecisions(t *testing.T) {
	eperm := uint32(seccompRetErrno | uint32(unix.EPERM))
	cases := []struct {
		name string
		nr   uint32
		args []uint64
		want uint32
	}{
		{"read allowed", unix.SYS_READ, nil, seccompRetAllow},
		{"mount denied", unix.SYS_MOUNT, nil, eperm},
		{"ptrace allowed (own user and pid namespaces)", unix.SYS_PTRACE, nil, seccompRetAllow},
		{"unshare denied", unix.SYS_UNSHARE, nil, eperm},
		{"plain ioctl allowed", unix.SYS_IOCTL, []uint64{1, unix.TCGETS}, seccompRetAllow},
		{"btrfs subvolume create denied", unix.SYS_IOCTL, []uint64{3, 0x5000940e}, eperm},
		{"btrfs snapshot v2 denied", unix.SYS_IOCTL, []uint64{3, 0x50009417}, eperm},
		{"FICLONE allowed", unix.SYS_IOCTL, []uint64{3, unix.FICLONE}, seccompRetAllow},
		{"clone3 ENOSYS", unix.SYS_CLONE3, nil, seccompRetErrno | uint32(unix.ENOSYS)},
		{"thread clone allowed", unix.SYS_CLONE, []uint64{unix.CLONE_VM | unix.CLONE_THREAD}, seccompRetAllow},
		{"clone into user ns denied", unix.SYS_CLONE, []uint64{unix.CLONE_NEWUSER}, eperm},
		{"x32 denied", unix.SYS_READ | x32SyscallBit, nil, eperm},
	}
	for _, c := range cases {
		if got := evalFilter(t, c.nr, c.args...); got != c.want {
			t.Errorf("%s: got %#x want %#x", c.name, got, c.want)
		}
	}
}
