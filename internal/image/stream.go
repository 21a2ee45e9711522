package image

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

const (
	streamChunk = 1 << 20 // bytes a layerStream hands the extractor at once
	streamAhead = 8       // chunks it may read ahead of the extractor
)

// errStreamClosed ends a layerStream's reader when the extractor is done
// with it (finished or failed) before the stream ended.
var errStreamClosed = errors.New("layer stream closed")

// layerStream reads a layer's blob in a goroutine of its own: the
// transfer (TLS), the compressed blob's digest, decompression and the
// diffID's hash run there, while the caller parses the tar and writes the
// files, so a pull uses two cores rather than one. At most streamAhead
// chunks of streamChunk bytes are in flight, which bounds what an
// extractor that stopped reading (a cap, a bad member, a compressed bomb
// after the tar's end) lets the goroutine decompress.
//
// Every byte is hashed once for each digest it must match, and only once
// when both are of the same bytes: an uncompressed blob is its own tar, so
// its diffID's hash is also its digest's (Sums).
type layerStream struct {
	chunks chan []byte // filled, in order; closed once err is set
	free   chan []byte
	stop   chan struct{}
	drain  chan struct{} // closed by checkBlob: read the rest of the blob, hand nothing on
	once   sync.Once
	dOnce  sync.Once

	cur, held []byte // the extractor's: what is left of the chunk it reads, the chunk

	// Set by the goroutine before it closes chunks.
	err      error     // io.EOF when the whole blob was read
	raw      hash.Hash // the blob's hash; nil when the blob is its tar (diff)
	diff     hash.Hash // the tar's hash: the decompressed stream, all of it
	compress string    // "gzip", "zstd" or "" for none
	rawDone  bool      // the blob was read to its end

	withDigest bool
}

// newLayerStream starts reading rc. withDigest hashes the blob as read for
// a digest of its own (a layout's or registry's blob; a docker archive's
// tar is checked against its diffID alone). count, if set, sees the blob's
// bytes as read (progress).
func newLayerStream(rc io.Reader, withDigest bool, count func(io.Reader) io.Reader) *layerStream {
	ls := &layerStream{
		chunks: make(chan []byte, streamAhead),
		free:   make(chan []byte, streamAhead+1),
		stop:   make(chan struct{}),
		drain:  make(chan struct{}),
		diff:   sha256.New(),

		withDigest: withDigest,
	}
	for range streamAhead + 1 {
		ls.free <- make([]byte, streamChunk)
	}
	go ls.run(rc, withDigest, count)
	return ls
}

func (ls *layerStream) run(rc io.Reader, withDigest bool, count func(io.Reader) io.Reader) {
	var err error
	defer func() {
		ls.err = err
		close(ls.chunks)
	}()
	if count != nil {
		rc = count(rc)
	}
	// The blob's hash runs below the sniffing buffer; once the blob turns
	// out to be uncompressed it stops, and the diffID's hash, which then
	// sees the very same bytes, stands for both.
	var raw *switchHash
	if withDigest {
		raw = &switchHash{r: rc, h: sha256.New()}
		rc = raw
	}
	br := bufio.NewReaderSize(rc, 64<<10)
	var magic []byte
	if withDigest {
		// A blob is decompressed by its magic; a stream without a digest
		// is the tar itself, whatever its first bytes.
		magic, _ = br.Peek(4)
	}
	var dr io.Reader = br
	switch {
	case len(magic) >= 2 && magic[0] == 0x1f && magic[1] == 0x8b:
		ls.compress = "gzip"
		zr, zerr := gzip.NewReader(br)
		if zerr != nil {
			err = invalid("decompress layer", zerr)
			return
		}
		defer zr.Close()
		dr = zr
	case bytes.Equal(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		ls.compress = "zstd"
		zr, zerr := zstd.NewReader(br, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(1<<27))
		if zerr != nil {
			err = invalid("decompress layer", zerr)
			return
		}
		defer zr.Close()
		dr = zr
	}
	if raw != nil {
		if ls.compress == "" {
			raw.h = nil
		} else {
			ls.raw = raw.h
		}
	}
	r := io.TeeReader(dr, ls.diff)
	// rest reads the blob to its end (checkBlob), through the hash that
	// stands for its digest: below the decompressor, whose state may be
	// broken, when compressed; the tar's own when not.
	rest := func() {
		var src io.Reader = br
		if ls.compress == "" {
			src = r
		}
		if _, cerr := io.Copy(io.Discard, src); cerr == nil {
			ls.rawDone = true
		}
	}
	for {
		var buf []byte
		select {
		case buf = <-ls.free:
		case <-ls.drain:
			rest()
			return
		case <-ls.stop:
			err = errStreamClosed
			return
		}
		n, rerr := io.ReadFull(r, buf)
		if n > 0 {
			select {
			case ls.chunks <- buf[:n]:
			case <-ls.drain:
				rest()
				return
			case <-ls.stop:
				err = errStreamClosed
				return
			}
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			err = rerr
			if ls.raw != nil && (raw == nil || raw.err == nil) {
				// The decompressor failed, not the transfer: whether the
				// blob is the one its digest names is the better answer.
				rest()
			}
			return
		}
	}
	if ls.raw != nil {
		// The decompressor may stop at its own end marker: the blob's
		// digest covers what follows too. (A registry's blob is bounded
		// by its manifest size, a local file by its own.)
		if _, cerr := io.Copy(io.Discard, br); cerr != nil {
			err = cerr
			return
		}
	}
	ls.rawDone = true
	err = io.EOF
}

// Read gives the decompressed stream, and the goroutine's error (io.EOF
// at the end) once it is all read.
func (ls *layerStream) Read(p []byte) (int, error) {
	for len(ls.cur) == 0 {
		if ls.held != nil {
			ls.free <- ls.held[:cap(ls.held)]
			ls.held = nil
		}
		c, ok := <-ls.chunks
		if !ok {
			return 0, ls.err
		}
		ls.cur, ls.held = c, c
	}
	n := copy(p, ls.cur)
	ls.cur = ls.cur[n:]
	return n, nil
}

// Sums returns the blob's and the tar's hashes, once Read returned io.EOF;
// the blob's is the tar's for an uncompressed blob, nil without a digest.
func (ls *layerStream) Sums() (raw, diff []byte) {
	diff = ls.diff.Sum(nil)
	switch {
	case ls.raw != nil:
		raw = ls.raw.Sum(nil)
	case ls.withDigest && ls.compress == "":
		raw = diff
	}
	return raw, diff
}

// checkBlob, when reading the layer failed, tells whether the blob was
// what its digest names: a blob with other bytes than the manifest's
// (corrupted at the registry, in transit or on disk) fails as a digest
// mismatch rather than as whatever its bytes broke first (the
// decompressor, a tar header). It reads what is left of the blob
// (bounded: a registry's by its manifest size, a local file by its own),
// hands nothing more to Read, and returns the mismatch, or nil when the
// blob matches its digest, has none, or could not be read to its end.
func (ls *layerStream) checkBlob(digest string) error {
	if !ls.withDigest || digest == "" {
		return nil
	}
	ls.dOnce.Do(func() { close(ls.drain) })
	for c := range ls.chunks {
		ls.free <- c[:cap(c)]
	}
	if !ls.rawDone {
		return nil
	}
	raw, _ := ls.Sums()
	if d := "sha256:" + hex.EncodeToString(raw); d != digest {
		return blobMismatch(d, digest)
	}
	return nil
}

// blobMismatch is a blob that does not hash to the manifest's digest.
func blobMismatch(got, want string) error {
	return mismatch(fmt.Sprintf("the layer blob does not match its digest: it hashes to %s, the manifest says %s", got, want))
}

// Close stops the goroutine and waits for it. A goroutine blocked reading
// the blob returns when the blob's reader does: the caller cancels a
// transfer's context before Close.
func (ls *layerStream) Close() {
	ls.once.Do(func() { close(ls.stop) })
	for range ls.chunks {
	}
}

// switchHash hashes what is read through it while h is set, and keeps
// the read's error (the blob's source failing, not its decoder).
type switchHash struct {
	r   io.Reader
	h   hash.Hash
	err error
}

func (s *switchHash) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if s.h != nil && n > 0 {
		s.h.Write(p[:n])
	}
	if err != nil && err != io.EOF {
		s.err = err
	}
	return n, err
}
