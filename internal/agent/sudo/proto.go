package sudo

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/berth-sh/berth/internal/errdefs"
)

// Socket is the abstract unix socket the agent serves sudo on. Abstract,
// so there is no file to replace, chmod or link: the name lives in the
// sandbox's own network namespace, and the agent (PID 1) binds it before
// any process of the sandbox runs. The client still checks that its peer
// is PID 1 as root before it hands over a descriptor (peerIsAgent).
const Socket = "@berth-sudo"

// Dir is where the sudo program is mounted in a sandbox that has it, and
// what the engine puts first in its commands' PATH.
const Dir = "/.berth/bin"

// SecurePath is the PATH of a command run through sudo, as Debian's
// sudoers secure_path (with or without -E), with Dir first so a command
// run through sudo can call sudo -u back.
const SecurePath = Dir + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// magic opens every request; the version is its last byte.
var magic = [4]byte{'B', 'S', 'U', '1'}

// Bounds of a request. A request is the caller's argv and environment,
// so the kernel's own bounds for execve are the model: 128 KiB per
// string (MAX_ARG_STRLEN), and the whole at most MaxRequest.
const (
	MaxRequest = 1 << 20
	MaxArgs    = 4096
	MaxEnv     = 4096
	MaxString  = 128 << 10
	MaxPath    = 4096
	MaxUser    = 256
	// NumFDs is how many descriptors a request carries: the caller's
	// stdin, stdout and stderr, no more and no fewer.
	NumFDs = 3
)

// headerLen is the magic and the body's length (big-endian uint32).
const headerLen = 8

// Request is what the sudo program asks the agent's helper to run. The
// helper applies the policy (environment reset, the target's HOME and
// PATH, SUDO_* from the kernel's word on who asked, not the request's).
type Request struct {
	// Argv is the command. Empty only with Login or Shell (an
	// interactive shell).
	Argv []string `json:"argv"`
	// Env is the caller's environment, KEY=VALUE.
	Env []string `json:"env"`
	// Set are VAR=value given on sudo's command line: set after the
	// policy, whatever -E says.
	Set []string `json:"set,omitempty"`
	// Cwd is the caller's working directory (absolute).
	Cwd string `json:"cwd"`
	// User is the target: a name or uid of the sandbox; "" is root.
	User string `json:"user,omitempty"`
	// PreserveEnv keeps the caller's environment (-E); PreserveList
	// keeps only these names beside the reset one (--preserve-env=A,B).
	PreserveEnv  bool     `json:"preserve_env,omitempty"`
	PreserveList []string `json:"preserve_list,omitempty"`
	// Login runs the target's shell as a login shell in its home (-i);
	// Shell runs $SHELL or the target's shell (-s). With Argv, the shell
	// runs it with -c.
	Login bool `json:"login,omitempty"`
	Shell bool `json:"shell,omitempty"`
}

// Validate applies the bounds: counts, sizes, NUL bytes, an absolute
// working directory, KEY=VALUE environment entries.
func (r *Request) Validate() error {
	if len(r.Argv) == 0 && !r.Login && !r.Shell {
		return errdefs.Invalid("no command")
	}
	if len(r.Argv) > MaxArgs {
		return errdefs.TooLarge("more than %d arguments", MaxArgs)
	}
	if len(r.Env)+len(r.Set) > MaxEnv || len(r.PreserveList) > MaxEnv {
		return errdefs.TooLarge("more than %d environment entries", MaxEnv)
	}
	if len(r.Argv) > 0 && r.Argv[0] == "" {
		return errdefs.Invalid("empty command name")
	}
	for _, s := range r.Argv {
		if err := checkString("argument", s, MaxString); err != nil {
			return err
		}
	}
	for _, list := range [][]string{r.Env, r.Set} {
		for _, kv := range list {
			if err := checkString("environment entry", kv, MaxString); err != nil {
				return err
			}
			if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
				return errdefs.Invalid("environment entry %q is not KEY=VALUE", clip(kv))
			}
		}
	}
	for _, k := range r.PreserveList {
		if err := checkString("variable name", k, MaxString); err != nil {
			return err
		}
		if k == "" || strings.Contains(k, "=") {
			return errdefs.Invalid("bad variable name %q", clip(k))
		}
	}
	if err := checkString("working directory", r.Cwd, MaxPath); err != nil {
		return err
	}
	if !path.IsAbs(r.Cwd) {
		return errdefs.Invalid("working directory %q is not absolute", clip(r.Cwd))
	}
	if err := checkString("user", r.User, MaxUser); err != nil {
		return err
	}
	return nil
}

func checkString(what, s string, limit int) error {
	if len(s) > limit {
		return errdefs.TooLarge("%s longer than %d bytes", what, limit)
	}
	if strings.IndexByte(s, 0) >= 0 {
		return errdefs.Invalid("NUL byte in %s", what)
	}
	return nil
}

// clip shortens s for an error message.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// EncodeHeader returns the header of a request whose body is n bytes.
func EncodeHeader(n int) []byte {
	h := make([]byte, headerLen)
	copy(h, magic[:])
	binary.BigEndian.PutUint32(h[4:], uint32(n))
	return h
}

// ParseHeader checks a request's header and returns its body's length.
func ParseHeader(h []byte) (int, error) {
	if len(h) != headerLen {
		return 0, errdefs.Invalid("short header")
	}
	if [4]byte(h[:4]) != magic {
		return 0, errdefs.Invalid("not a sudo request (or another version)")
	}
	n := binary.BigEndian.Uint32(h[4:])
	if n == 0 || n > MaxRequest {
		return 0, errdefs.TooLarge("request of %d bytes (at most %d)", n, MaxRequest)
	}
	return int(n), nil
}

// DecodeBody parses and validates a request's body: strict JSON, one
// object, no unknown fields.
func DecodeBody(b []byte) (*Request, error) {
	if len(b) > MaxRequest {
		return nil, errdefs.TooLarge("request of %d bytes (at most %d)", len(b), MaxRequest)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var r Request
	if err := dec.Decode(&r); err != nil {
		return nil, errdefs.Invalid("bad request: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errdefs.Invalid("bad request: data after the object")
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return &r, nil
}

// Frames. The helper answers with frames of a type byte, a big-endian
// uint32 length and the payload; the client sends signal frames of two
// bytes ('S', the signal's number) and nothing else after its request.
const (
	frameError  = 'E' // payload: a message for the caller's stderr
	frameExit   = 'X' // payload: 8 bytes, the exit code and the signal (int32 each)
	frameSignal = 'S'

	maxFrame = 4 << 10
)

// Exit is how the command ended: its code, or the signal that ended it.
type Exit struct {
	Code   int
	Signal int
}

func writeFrame(w io.Writer, t byte, payload []byte) error {
	if len(payload) > maxFrame {
		payload = payload[:maxFrame]
	}
	b := make([]byte, 5+len(payload))
	b[0] = t
	binary.BigEndian.PutUint32(b[1:], uint32(len(payload)))
	copy(b[5:], payload)
	_, err := w.Write(b)
	return err
}

func writeExit(w io.Writer, e Exit) error {
	p := make([]byte, 8)
	binary.BigEndian.PutUint32(p, uint32(int32(e.Code)))
	binary.BigEndian.PutUint32(p[4:], uint32(int32(e.Signal)))
	return writeFrame(w, frameExit, p)
}

// readAnswer reads the helper's answer: the exit, or its refusal.
func readAnswer(r io.Reader) (Exit, error) {
	var h [5]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return Exit{}, fmt.Errorf("the agent closed the connection: %w", err)
	}
	n := binary.BigEndian.Uint32(h[1:])
	if n > maxFrame {
		return Exit{}, fmt.Errorf("bad answer from the agent")
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(r, p); err != nil {
		return Exit{}, fmt.Errorf("the agent closed the connection: %w", err)
	}
	switch h[0] {
	case frameError:
		return Exit{}, refusal(string(p))
	case frameExit:
		if n != 8 {
			return Exit{}, fmt.Errorf("bad answer from the agent")
		}
		return Exit{Code: int(int32(binary.BigEndian.Uint32(p))), Signal: int(int32(binary.BigEndian.Uint32(p[4:])))}, nil
	}
	return Exit{}, fmt.Errorf("bad answer from the agent")
}

// refusal is the helper's reason for not running a command.
type refusal string

func (r refusal) Error() string { return string(r) }
