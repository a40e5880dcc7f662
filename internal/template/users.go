package template

import (
	"bufio"
	"bytes"
	"strconv"
	"strings"
)

// Sandbox conventions shared by every template.
const (
	// AgentUser is the name of the unprivileged user an agent runs as.
	AgentUser = "agent"
	// AgentUID is the uid of AgentUser.
	AgentUID = 1000
	// AgentGID is the gid of AgentUser's primary group (also named "agent").
	AgentGID = 1000
	// AgentHome is AgentUser's home directory.
	AgentHome = "/home/agent"
	// AgentShell is AgentUser's login shell.
	AgentShell = "/bin/bash"
	// Hostname is the placeholder host name written into /etc/hostname and
	// /etc/hosts of a host template; the runtime sets the real UTS name.
	Hostname = "sandbox"
)

// Generated account databases of a host template: root, the agent and
// nobody, plus the few system groups that devices and tools expect (tty for
// devpts, shadow for the shadow files, users).
const (
	hostPasswd = "root:x:0:0:root:/root:/bin/bash\n" +
		"agent:x:1000:1000:agent:/home/agent:/bin/bash\n" +
		"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
	hostGroup = "root:x:0:\n" +
		"tty:x:5:\n" +
		"shadow:x:42:\n" +
		"users:x:100:\n" +
		"agent:x:1000:\n" +
		"nogroup:x:65534:\n"
	// "*" and "!" lock every password: nobody logs in with a password.
	hostShadow = "root:*:20000:0:99999:7:::\n" +
		"agent:!:20000:0:99999:7:::\n" +
		"nobody:*:20000:0:99999:7:::\n"
	hostGShadow = "root:*::\n" +
		"tty:*::\n" +
		"shadow:*::\n" +
		"users:*::\n" +
		"agent:!::\n" +
		"nogroup:*::\n"
)

// Lines appended to an image's account databases when the agent is missing.
const (
	agentGroupLine  = "agent:x:1000:\n"
	agentShadowLine = "agent:!:20000:0:99999:7:::\n"
	// Used when an image has no /etc/group at all.
	minimalGroup = "root:x:0:\n" + agentGroupLine + "nogroup:x:65534:\n"
)

// agentPasswdLine is the /etc/passwd line of the agent with login shell sh.
func agentPasswdLine(sh string) string {
	return "agent:x:1000:1000:agent:/home/agent:" + sh + "\n"
}

// minimalPasswd is the /etc/passwd written into an image that has none.
func minimalPasswd(sh string) string {
	return "root:x:0:0:root:/root:" + sh + "\n" + agentPasswdLine(sh) +
		"nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"
}

// dbEntry is the name and numeric id (the third field) of one line of
// /etc/passwd or /etc/group.
type dbEntry struct {
	name string
	id   int
}

// parseDB returns the entries of an /etc/passwd or /etc/group file, skipping
// comments, blank lines and lines it cannot parse (NIS "+" lines and the like).
func parseDB(data []byte) []dbEntry {
	var out []dbEntry
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Split(line, ":")
		if len(f) < 3 {
			continue
		}
		id, err := strconv.Atoi(f[2])
		if err != nil {
			continue
		}
		out = append(out, dbEntry{name: f[0], id: id})
	}
	return out
}

// hasName reports whether an account database lists name.
func hasName(entries []dbEntry, name string) bool {
	for _, e := range entries {
		if e.name == name {
			return true
		}
	}
	return false
}

// appendLine appends line to data, adding the newline the file may lack.
func appendLine(data []byte, line string) []byte {
	if len(data) > 0 && data[len(data)-1] != '\n' {
		data = append(data, '\n')
	}
	return append(data, line...)
}
