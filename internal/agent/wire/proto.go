package wire

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/berth-sh/berth/internal/errdefs"
)

// ProtocolVersion is sent in every request header. An agent serves any
// request whose version is not newer than its own; new fields are added
// as optional JSON fields, so old agents ignore them.
const ProtocolVersion = 1

// Limits of the wire format. Both sides enforce them on what they read.
const (
	MaxHeaderBytes = 64 << 10 // request header line, newline included
	MaxFrameBytes  = 1 << 20  // payload of any one frame
	DataChunk      = 32 << 10 // payload size the writers of byte streams use
	MaxPathBytes   = 4096     // PATH_MAX
	MaxListEntries = 100_000  // entries of one List
	MaxEntryJSON   = 16 << 10 // one FileInfo as JSON
	MaxListBytes   = 128 << 20
)

// FrameType is the first byte of a frame.
type FrameType byte

const (
	FrameStdin    FrameType = 1  // client→agent: stdin bytes
	FrameStdinEOF FrameType = 2  // client→agent: stdin closed (empty payload)
	FrameResize   FrameType = 3  // client→agent: JSON Resize
	FrameSignal   FrameType = 4  // client→agent: JSON SignalMsg
	FrameStdout   FrameType = 5  // agent→client: stdout bytes (the PTY's output under TTY)
	FrameStderr   FrameType = 6  // agent→client: stderr bytes
	FrameExit     FrameType = 7  // agent→client: JSON Exit; last frame of an exec
	FrameError    FrameType = 8  // agent→client: JSON Error; last frame of any operation
	FrameData     FrameType = 9  // either way: file or tar bytes
	FrameEnd      FrameType = 10 // either way: end of a data stream, or success without result
	FrameResult   FrameType = 11 // agent→client: JSON result of an operation
)

func (t FrameType) String() string {
	switch t {
	case FrameStdin:
		return "stdin"
	case FrameStdinEOF:
		return "stdin-eof"
	case FrameResize:
		return "resize"
	case FrameSignal:
		return "signal"
	case FrameStdout:
		return "stdout"
	case FrameStderr:
		return "stderr"
	case FrameExit:
		return "exit"
	case FrameError:
		return "error"
	case FrameData:
		return "data"
	case FrameEnd:
		return "end"
	case FrameResult:
		return "result"
	case FrameGap:
		return "gap"
	}
	return fmt.Sprintf("frame(%d)", byte(t))
}

// Operation names of the request header.
const (
	OpPing      = "ping"
	OpExec      = "exec"
	OpStat      = "stat"
	OpList      = "list"
	OpMkdir     = "mkdir"
	OpRemove    = "remove"
	OpReadFile  = "read_file"
	OpWriteFile = "write_file"
	OpReadTar   = "read_tar"
	OpWriteTar  = "write_tar"
	// OpQuiesce closes the agent's own listening socket (gVisor) before a
	// checkpoint; it listens again on SigRelisten after the restore.
	OpQuiesce = "quiesce"
	OpDial    = "dial" // dial.go
)

// Operations of files beyond the basic ones (agentd move.go).
const (
	// OpMove renames Path to Dest by rename(2)'s rules, both resolved
	// inside the root, the last component of neither followed.
	OpMove = "move"
	// OpWatch streams the changes under Path (a directory; its subtree
	// with Recursive) as result frames of WatchEvent until the client
	// closes the connection or the watch ends with an error frame.
	OpWatch = "watch"
)

// Stable error codes of error frames.
const (
	CodeInvalid     = "invalid_argument"
	CodeNotFound    = "not_found"
	CodeConflict    = "conflict"
	CodeTooLarge    = "too_large"
	CodePermission  = "permission_denied"
	CodeUnreachable = "unreachable"
	CodeExhausted   = "resource_exhausted"
	CodeInternal    = "internal"
)

// ErrProtocol marks a peer that broke the wire format.
var ErrProtocol = errors.New("agent protocol error")

func ProtocolErrorf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrProtocol, fmt.Sprintf(format, args...))
}

// ReadRequest reads and decodes the header line. br must have a buffer of
// MaxHeaderBytes so that ReadSlice enforces the cap.
func ReadRequest(br *bufio.Reader) (Request, error) {
	var req Request
	line, err := br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		return req, errdefs.TooLarge("request header exceeds %d bytes", MaxHeaderBytes)
	}
	if err != nil {
		return req, err
	}
	if err := DecodeRequest(line, &req); err != nil {
		return req, err
	}
	return req, nil
}

func DecodeRequest(line []byte, req *Request) error {
	dec := json.NewDecoder(bytes.NewReader(line))
	if err := dec.Decode(req); err != nil {
		return errdefs.Invalid("malformed request header: %v", err)
	}
	if req.V < 1 || req.V > ProtocolVersion {
		return errdefs.Invalid("unsupported protocol version %d (agent speaks %d)", req.V, ProtocolVersion)
	}
	if req.Op == "" {
		return errdefs.Invalid("request header without op")
	}
	return nil
}

// FrameReader reads frames. The payload it returns is valid until the next
// call of next.
type FrameReader struct {
	r   io.Reader
	hdr [5]byte
	buf []byte
}

func NewFrameReader(r io.Reader) *FrameReader { return &FrameReader{r: r} }

// next returns the next frame. io.EOF means the peer closed between frames;
// a frame cut short is io.ErrUnexpectedEOF.
func (fr *FrameReader) Next() (FrameType, []byte, error) {
	if _, err := io.ReadFull(fr.r, fr.hdr[:]); err != nil {
		return 0, nil, err
	}
	t := FrameType(fr.hdr[0])
	n := binary.BigEndian.Uint32(fr.hdr[1:])
	if n > MaxFrameBytes {
		return 0, nil, ProtocolErrorf("%s frame of %d bytes exceeds %d", t, n, MaxFrameBytes)
	}
	if uint32(cap(fr.buf)) < n {
		fr.buf = make([]byte, n, max(n, 4<<10))
	}
	p := fr.buf[:n]
	if _, err := io.ReadFull(fr.r, p); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, err
	}
	return t, p, nil
}

// FrameWriter writes frames; it is safe for concurrent use. write buffers,
// send writes through.
type FrameWriter struct {
	mu  sync.Mutex
	bw  *bufio.Writer
	err error // sticky: the first write error
}

func NewFrameWriter(w io.Writer) *FrameWriter {
	return &FrameWriter{bw: bufio.NewWriterSize(w, 64<<10)}
}

func (fw *FrameWriter) writeLocked(t FrameType, p []byte) error {
	if fw.err != nil {
		return fw.err
	}
	if len(p) > MaxFrameBytes {
		return fmt.Errorf("frame of %d bytes exceeds %d", len(p), MaxFrameBytes)
	}
	var hdr [5]byte
	hdr[0] = byte(t)
	binary.BigEndian.PutUint32(hdr[1:], uint32(len(p)))
	if _, err := fw.bw.Write(hdr[:]); err != nil {
		fw.err = err
		return err
	}
	if _, err := fw.bw.Write(p); err != nil {
		fw.err = err
		return err
	}
	return nil
}

// write buffers a frame; it reaches the peer on the next flush or send, or
// when the buffer fills.
func (fw *FrameWriter) Write(t FrameType, p []byte) error {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	return fw.writeLocked(t, p)
}

// send writes a frame and flushes.
func (fw *FrameWriter) Send(t FrameType, p []byte) error {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	if err := fw.writeLocked(t, p); err != nil {
		return err
	}
	return fw.flushLocked()
}

func (fw *FrameWriter) SendJSON(t FrameType, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return fw.Send(t, b)
}

func (fw *FrameWriter) Flush() error {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	return fw.flushLocked()
}

func (fw *FrameWriter) flushLocked() error {
	if fw.err != nil {
		return fw.err
	}
	if err := fw.bw.Flush(); err != nil {
		fw.err = err
		return err
	}
	return nil
}

// DataWriter turns writes into data frames of at most DataChunk bytes.
type DataWriter struct{ FW *FrameWriter }

func (d DataWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		c := min(len(p), DataChunk)
		if err := d.FW.Write(FrameData, p[:c]); err != nil {
			return n, err
		}
		n += c
		p = p[c:]
	}
	return n, nil
}

// DataReader reads a stream of data frames closed by an end frame, which
// it reports as io.EOF. A connection that ends before the end frame is
// io.ErrUnexpectedEOF: a client that gives up mid-upload never looks like
// one that finished.
type DataReader struct {
	FR  *FrameReader
	cur []byte
	err error
}

func (d *DataReader) Read(p []byte) (int, error) {
	for len(d.cur) == 0 {
		if d.err != nil {
			return 0, d.err
		}
		t, payload, err := d.FR.Next()
		switch {
		case err == io.EOF:
			d.err = io.ErrUnexpectedEOF
		case err != nil:
			d.err = err
		case t == FrameData:
			d.cur = payload
		case t == FrameEnd:
			d.err = io.EOF
		default:
			d.err = ProtocolErrorf("unexpected %s frame in a data stream", t)
		}
	}
	n := copy(p, d.cur)
	d.cur = d.cur[n:]
	return n, nil
}

// CodeOf returns the wire code of err's category.
func CodeOf(err error) string {
	switch {
	case errors.Is(err, errdefs.ErrInvalid):
		return CodeInvalid
	case errors.Is(err, errdefs.ErrNotFound):
		return CodeNotFound
	case errors.Is(err, errdefs.ErrConflict):
		return CodeConflict
	case errors.Is(err, errdefs.ErrTooLarge):
		return CodeTooLarge
	case errors.Is(err, errdefs.ErrPermission):
		return CodePermission
	case errors.Is(err, errdefs.ErrUnreachable):
		return CodeUnreachable
	case errors.Is(err, errdefs.ErrExhausted):
		return CodeExhausted
	}
	return CodeInternal
}

// ErrorFromWire turns an error frame into an error of the matching
// category. The message comes from the agent, which the client does not
// trust: it becomes SafeMessage's, so what sandbox code wrote cannot
// reach an event, a log line or an operator's terminal as control bytes.
func ErrorFromWire(we Error) error {
	msg := SafeMessage(we.Message)
	switch we.Code {
	case CodeInvalid:
		return errdefs.Invalid("%s", msg)
	case CodeNotFound:
		return errdefs.NotFound("%s", msg)
	case CodeConflict:
		return errdefs.Conflict("%s", msg)
	case CodeTooLarge:
		return errdefs.TooLarge("%s", msg)
	case CodePermission:
		return errdefs.Permission("%s", msg)
	case CodeUnreachable:
		return errdefs.Unreachable("%s", msg)
	case CodeExhausted:
		return errdefs.Exhausted("%s", msg)
	}
	return fmt.Errorf("agent: %s", msg)
}

// maxMessageBytes caps a message from the agent (SafeMessage).
const maxMessageBytes = 1024

// SafeMessage makes text from the agent fit to show: invalid UTF-8 and
// every control character (C0 but none, DEL, C1 — a terminal's escape
// sequences start with ESC or CSI) written as \xNN or \uNNNN, then cut at
// a rune boundary to maxMessageBytes with "..." after.
func SafeMessage(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		var piece string
		switch {
		case r == utf8.RuneError && n == 1:
			piece = fmt.Sprintf(`\x%02x`, s[i])
		case r < 0x20 || r == 0x7f:
			piece = fmt.Sprintf(`\x%02x`, r)
		case r >= 0x80 && r < 0xa0, r == 0x2028, r == 0x2029:
			piece = fmt.Sprintf(`\u%04x`, r)
		default:
			piece = s[i : i+n]
		}
		if b.Len()+len(piece) > maxMessageBytes {
			b.WriteString("...")
			break
		}
		b.WriteString(piece)
		i += n
	}
	return b.String()
}
