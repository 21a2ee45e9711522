package agent

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/berth-sh/berth/internal/errdefs"
)

// protocolVersion is sent in every request header. An agent serves any
// request whose version is not newer than its own; new fields are added
// as optional JSON fields, so old agents ignore them.
const protocolVersion = 1

// Limits of the wire format. Both sides enforce them on what they read.
const (
	maxHeaderBytes = 64 << 10 // request header line, newline included
	maxFrameBytes  = 1 << 20  // payload of any one frame
	dataChunk      = 32 << 10 // payload size the writers of byte streams use
	maxPathBytes   = 4096     // PATH_MAX
	maxListEntries = 100_000  // entries of one List
	maxEntryJSON   = 16 << 10 // one FileInfo as JSON
	maxListBytes   = 128 << 20
)

// frameType is the first byte of a frame.
type frameType byte

const (
	frameStdin    frameType = 1  // client→agent: stdin bytes
	frameStdinEOF frameType = 2  // client→agent: stdin closed (empty payload)
	frameResize   frameType = 3  // client→agent: JSON Resize
	frameSignal   frameType = 4  // client→agent: JSON signalMsg
	frameStdout   frameType = 5  // agent→client: stdout bytes (the PTY's output under TTY)
	frameStderr   frameType = 6  // agent→client: stderr bytes
	frameExit     frameType = 7  // agent→client: JSON Exit; last frame of an exec
	frameError    frameType = 8  // agent→client: JSON wireError; last frame of any operation
	frameData     frameType = 9  // either way: file or tar bytes
	frameEnd      frameType = 10 // either way: end of a data stream, or success without result
	frameResult   frameType = 11 // agent→client: JSON result of an operation
)

func (t frameType) String() string {
	switch t {
	case frameStdin:
		return "stdin"
	case frameStdinEOF:
		return "stdin-eof"
	case frameResize:
		return "resize"
	case frameSignal:
		return "signal"
	case frameStdout:
		return "stdout"
	case frameStderr:
		return "stderr"
	case frameExit:
		return "exit"
	case frameError:
		return "error"
	case frameData:
		return "data"
	case frameEnd:
		return "end"
	case frameResult:
		return "result"
	}
	return fmt.Sprintf("frame(%d)", byte(t))
}

// Operation names of the request header.
const (
	opPing      = "ping"
	opExec      = "exec"
	opStat      = "stat"
	opList      = "list"
	opMkdir     = "mkdir"
	opRemove    = "remove"
	opReadFile  = "read_file"
	opWriteFile = "write_file"
	opReadTar   = "read_tar"
	opWriteTar  = "write_tar"
	// opQuiesce closes the agent's own listening socket (gVisor) before a
	// checkpoint; it listens again on SigRelisten after the restore.
	opQuiesce = "quiesce"
	opDial    = "dial" // dial.go
)

// Stable error codes of error frames.
const (
	codeInvalid     = "invalid_argument"
	codeNotFound    = "not_found"
	codeConflict    = "conflict"
	codeTooLarge    = "too_large"
	codePermission  = "permission_denied"
	codeUnreachable = "unreachable"
	codeExhausted   = "resource_exhausted"
	codeInternal    = "internal"
)

// errProtocol marks a peer that broke the wire format.
var errProtocol = errors.New("agent protocol error")

func protoErrorf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errProtocol, fmt.Sprintf(format, args...))
}

// readRequest reads and decodes the header line. br must have a buffer of
// maxHeaderBytes so that ReadSlice enforces the cap.
func readRequest(br *bufio.Reader) (request, error) {
	var req request
	line, err := br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		return req, errdefs.TooLarge("request header exceeds %d bytes", maxHeaderBytes)
	}
	if err != nil {
		return req, err
	}
	if err := decodeRequest(line, &req); err != nil {
		return req, err
	}
	return req, nil
}

func decodeRequest(line []byte, req *request) error {
	dec := json.NewDecoder(bytes.NewReader(line))
	if err := dec.Decode(req); err != nil {
		return errdefs.Invalid("malformed request header: %v", err)
	}
	if req.V < 1 || req.V > protocolVersion {
		return errdefs.Invalid("unsupported protocol version %d (agent speaks %d)", req.V, protocolVersion)
	}
	if req.Op == "" {
		return errdefs.Invalid("request header without op")
	}
	return nil
}

// frameReader reads frames. The payload it returns is valid until the next
// call of next.
type frameReader struct {
	r   io.Reader
	hdr [5]byte
	buf []byte
}

func newFrameReader(r io.Reader) *frameReader { return &frameReader{r: r} }

// next returns the next frame. io.EOF means the peer closed between frames;
// a frame cut short is io.ErrUnexpectedEOF.
func (fr *frameReader) next() (frameType, []byte, error) {
	if _, err := io.ReadFull(fr.r, fr.hdr[:]); err != nil {
		return 0, nil, err
	}
	t := frameType(fr.hdr[0])
	n := binary.BigEndian.Uint32(fr.hdr[1:])
	if n > maxFrameBytes {
		return 0, nil, protoErrorf("%s frame of %d bytes exceeds %d", t, n, maxFrameBytes)
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

// frameWriter writes frames; it is safe for concurrent use. write buffers,
// send writes through.
type frameWriter struct {
	mu  sync.Mutex
	bw  *bufio.Writer
	err error // sticky: the first write error
}

func newFrameWriter(w io.Writer) *frameWriter {
	return &frameWriter{bw: bufio.NewWriterSize(w, 64<<10)}
}

func (fw *frameWriter) writeLocked(t frameType, p []byte) error {
	if fw.err != nil {
		return fw.err
	}
	if len(p) > maxFrameBytes {
		return fmt.Errorf("frame of %d bytes exceeds %d", len(p), maxFrameBytes)
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
func (fw *frameWriter) write(t frameType, p []byte) error {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	return fw.writeLocked(t, p)
}

// send writes a frame and flushes.
func (fw *frameWriter) send(t frameType, p []byte) error {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	if err := fw.writeLocked(t, p); err != nil {
		return err
	}
	return fw.flushLocked()
}

func (fw *frameWriter) sendJSON(t frameType, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return fw.send(t, b)
}

func (fw *frameWriter) flush() error {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	return fw.flushLocked()
}

func (fw *frameWriter) flushLocked() error {
	if fw.err != nil {
		return fw.err
	}
	if err := fw.bw.Flush(); err != nil {
		fw.err = err
		return err
	}
	return nil
}

// dataWriter turns writes into data frames of at most dataChunk bytes.
type dataWriter struct{ fw *frameWriter }

func (d dataWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		c := min(len(p), dataChunk)
		if err := d.fw.write(frameData, p[:c]); err != nil {
			return n, err
		}
		n += c
		p = p[c:]
	}
	return n, nil
}

// dataReader reads a stream of data frames closed by an end frame, which
// it reports as io.EOF. A connection that ends before the end frame is
// io.ErrUnexpectedEOF: a client that gives up mid-upload never looks like
// one that finished.
type dataReader struct {
	fr  *frameReader
	cur []byte
	err error
}

func (d *dataReader) Read(p []byte) (int, error) {
	for len(d.cur) == 0 {
		if d.err != nil {
			return 0, d.err
		}
		t, payload, err := d.fr.next()
		switch {
		case err == io.EOF:
			d.err = io.ErrUnexpectedEOF
		case err != nil:
			d.err = err
		case t == frameData:
			d.cur = payload
		case t == frameEnd:
			d.err = io.EOF
		default:
			d.err = protoErrorf("unexpected %s frame in a data stream", t)
		}
	}
	n := copy(p, d.cur)
	d.cur = d.cur[n:]
	return n, nil
}

// codeOf returns the wire code of err's category.
func codeOf(err error) string {
	switch {
	case errors.Is(err, errdefs.ErrInvalid):
		return codeInvalid
	case errors.Is(err, errdefs.ErrNotFound):
		return codeNotFound
	case errors.Is(err, errdefs.ErrConflict):
		return codeConflict
	case errors.Is(err, errdefs.ErrTooLarge):
		return codeTooLarge
	case errors.Is(err, errdefs.ErrPermission):
		return codePermission
	case errors.Is(err, errdefs.ErrUnreachable):
		return codeUnreachable
	case errors.Is(err, errdefs.ErrExhausted):
		return codeExhausted
	}
	return codeInternal
}

// errorFromWire turns an error frame into an error of the matching
// category. The message comes from the agent, which the client does not
// trust: it is cut to a sane length.
func errorFromWire(we wireError) error {
	msg := we.Message
	if len(msg) > 1024 {
		msg = msg[:1024] + "..."
	}
	switch we.Code {
	case codeInvalid:
		return errdefs.Invalid("%s", msg)
	case codeNotFound:
		return errdefs.NotFound("%s", msg)
	case codeConflict:
		return errdefs.Conflict("%s", msg)
	case codeTooLarge:
		return errdefs.TooLarge("%s", msg)
	case codePermission:
		return errdefs.Permission("%s", msg)
	case codeUnreachable:
		return errdefs.Unreachable("%s", msg)
	case codeExhausted:
		return errdefs.Exhausted("%s", msg)
	}
	return fmt.Errorf("agent: %s", msg)
}
