package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"
)

// volumePath returns the escaped path of a volume, plus suffix.
func volumePath(id, suffix string) string {
	return "/v1/volumes/" + url.PathEscape(id) + suffix
}

// CreateVolume creates an empty persistent volume. A volume outlives every
// sandbox that mounts it; attach it with CreateSandboxRequest.Volumes.
func (c *Client) CreateVolume(ctx context.Context, req CreateVolumeRequest) (Volume, error) {
	var v Volume
	err := c.do(ctx, http.MethodPost, "/v1/volumes", nil, req, &v)
	return v, err
}

// ListVolumes lists the tenant's volumes; all includes soft-deleted ones.
func (c *Client) ListVolumes(ctx context.Context, all bool) ([]Volume, error) {
	var q url.Values
	if all {
		q = url.Values{"all": {"true"}}
	}
	list, err := listAll[Volume](ctx, c, "/v1/volumes", q)
	return list, err
}

// GetVolume describes a volume by id or name.
func (c *Client) GetVolume(ctx context.Context, id string) (Volume, error) {
	var v Volume
	err := c.do(ctx, http.MethodGet, volumePath(id, ""), nil, nil, &v)
	return v, err
}

// DeleteVolume soft-deletes a volume (recoverable with UndeleteVolume until
// its PurgeAt), or with purge destroys its data for good. It is refused
// (IsConflict) while a sandbox uses the volume.
func (c *Client) DeleteVolume(ctx context.Context, id string, purge bool) (Volume, error) {
	var q url.Values
	if purge {
		q = url.Values{"purge": {"true"}}
	}
	var v Volume
	err := c.do(ctx, http.MethodDelete, volumePath(id, ""), q, nil, &v)
	return v, err
}

// UndeleteVolume brings back a soft-deleted volume with its data.
func (c *Client) UndeleteVolume(ctx context.Context, id string) (Volume, error) {
	var v Volume
	err := c.do(ctx, http.MethodPost, volumePath(id, "/undelete"), nil, nil, &v)
	return v, err
}

// AttachVolume adds a volume mount to a stopped sandbox (mounted from its
// next start). It is refused (IsConflict) while the sandbox runs, is
// paused, or already has a mount at m.Path.
func (c *Client) AttachVolume(ctx context.Context, sandbox string, m VolumeMount) (Sandbox, error) {
	var sb Sandbox
	err := c.do(ctx, http.MethodPost, sandboxPath(sandbox, "/volumes"), nil, m, &sb)
	return sb, err
}

// DetachVolume removes the volume mount at path from a stopped sandbox;
// the volume and its data stay. It is refused (IsConflict) while the
// sandbox runs or is paused, and is not found when no volume is mounted at
// path.
func (c *Client) DetachVolume(ctx context.Context, sandbox, path string) (Sandbox, error) {
	var sb Sandbox
	err := c.do(ctx, http.MethodDelete, sandboxPath(sandbox, "/volumes"), url.Values{"path": {path}}, nil, &sb)
	return sb, err
}

// ParseVolumeMount parses the command-line form of a volume mount,
//
//	NAME[/SUB/PATH]:/mount/path[:ro]
//
// e.g. "shared:/data" or "shared/agents/a1:/data:ro" (":rw" is accepted
// too, and is the default). NAME is a volume name or id; SUB/PATH, when
// given, is a relative directory inside the volume without empty, "." or
// ".." components; the mount path is absolute, not /, and clean. One
// trailing slash on either is dropped. The daemon validates again: this
// only catches mistakes early with a clear message.
func ParseVolumeMount(s string) (VolumeMount, error) {
	var m VolumeMount
	fail := func(format string, args ...any) (VolumeMount, error) {
		return VolumeMount{}, fmt.Errorf("volume %q: %s (want NAME[/SUB/PATH]:/mount/path[:ro])", s, fmt.Sprintf(format, args...))
	}
	src, rest, ok := strings.Cut(s, ":")
	if !ok {
		return fail("no mount path")
	}
	target := rest
	if i := strings.LastIndexByte(rest, ':'); i >= 0 {
		switch opt := rest[i+1:]; opt {
		case "ro":
			m.ReadOnly = true
		case "rw":
		default:
			return fail("unknown option %q (only ro or rw)", opt)
		}
		target = rest[:i]
	}

	// One trailing slash is allowed on the sub-path and on the mount path
	// ("shared/agents/a1/:/data/"), and dropped.
	target = strings.TrimSuffix(target, "/")
	if strings.HasSuffix(src, "/") && strings.Count(src, "/") > 1 {
		src = strings.TrimSuffix(src, "/")
	}
	name, sub, hasSub := strings.Cut(src, "/")
	if name == "" {
		return fail("empty volume name")
	}
	if err := checkVolumeField("volume name", name); err != nil {
		return fail("%v", err)
	}
	if hasSub {
		if sub == "" {
			return fail("empty sub-path after %q", name+"/")
		}
		if err := checkVolumeField("sub-path", sub); err != nil {
			return fail("%v", err)
		}
		for comp := range strings.SplitSeq(sub, "/") {
			switch comp {
			case "":
				return fail("sub-path %q has an empty component", sub)
			case ".", "..":
				return fail("sub-path %q may not contain %q", sub, comp)
			}
		}
		m.SubPath = sub
	}

	if target == "" {
		if strings.HasPrefix(rest, "/") {
			return fail("cannot mount over /")
		}
		return fail("empty mount path")
	}
	if err := checkVolumeField("mount path", target); err != nil {
		return fail("%v", err)
	}
	if strings.Contains(target, ":") {
		return fail("mount path %q may not contain ':'", target)
	}
	if !strings.HasPrefix(target, "/") {
		return fail("mount path %q is not absolute", target)
	}
	for comp := range strings.SplitSeq(target[1:], "/") {
		switch comp {
		case "":
			return fail("mount path %q has an empty component", target)
		case ".", "..":
			return fail("mount path %q may not contain %q", target, comp)
		}
	}
	m.Volume = name
	m.Path = target
	return m, nil
}

// checkVolumeField refuses invalid UTF-8 and control characters, which no
// name or path of a mount needs.
func checkVolumeField(what, v string) error {
	if !utf8.ValidString(v) {
		return errors.New(what + " is not valid UTF-8")
	}
	for _, r := range v {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%s %q contains a control character", what, v)
		}
	}
	return nil
}

// FormatVolumeMount is the inverse of ParseVolumeMount: the command-line
// form of m, e.g. "shared/agents/a1:/data:ro".
func FormatVolumeMount(m VolumeMount) string {
	s := m.Volume
	if m.SubPath != "" {
		s += "/" + m.SubPath
	}
	s += ":" + m.Path
	if m.ReadOnly {
		s += ":ro"
	}
	return s
}
