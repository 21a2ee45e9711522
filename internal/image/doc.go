// Package image is berth's template layer store: it imports OCI images
// (from an OCI layout, a `docker save` or OCI-layout tarball, or a
// registry), commits sandbox upper directories as new layers, builds the
// built-in "host" template, and garbage-collects layers nobody uses.
//
// # Layout on disk
//
//	<root>/                     0711
//	  layers/<hex>/             one layer, <hex> = sha256 of its uncompressed tar (diffID)
//	    fs/                     the unpacked tree: LayerPath, an overlay lowerdir as it is
//	    meta.json               unpacked size and member counts
//	  tmp/s-<rand>.lock         flock held by a live Store
//	  tmp/s-<rand>/             that Store's scratch space: unpacks in progress, GC trash
//
// A layer is unpacked into scratch space, its digests checked, the
// filesystem synced, and only then renamed to layers/<hex>. A layer dir is
// therefore complete and is what its name says, or absent; two unpacks of
// one layer race harmlessly (the loser's rename fails and it reuses the
// winner's). Scratch dirs of crashed processes are swept on Open.
//
// Layers are laid out for overlayfs: OCI whiteouts (".wh.<name>") become
// character devices 0/0, opaque markers (".wh..wh..opq") become the
// trusted.overlay.opaque="y" xattr, and every owner is shifted by the
// store's IDMap into the host range of the sandboxes' user namespace, so a
// lowerdir needs no idmapped mount.
//
// # Trust model
//
// Image content is untrusted: it comes from any registry or from a
// tenant's upload, and sandbox upper dirs are written by sandboxed code.
// The daemon unpacks as host root, so the extractor
//   - resolves every parent directory with openat2(RESOLVE_BENEATH|
//     RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS) relative to the layer's fd
//     and creates entries with *at calls and O_NOFOLLOW: no member can write
//     through "..", an absolute path or a symlink, even one it planted;
//   - stores symlink targets verbatim (they are only resolved inside the
//     sandbox) and accepts hardlinks only to members already unpacked;
//   - keeps only user.* xattrs (not user.overlay.*), never trusted.* or
//     security.*, and creates no device nodes or fifos except whiteouts;
//   - caps unpacked bytes and member count per layer (errdefs.ErrTooLarge)
//     and reports malformed input as errdefs.ErrInvalid;
//   - under a Budget (a tenant's import: WithBudget), charges each file to
//     the bytes the import has left before writing it (the quota error),
//     and reuses a cached layer unread only if the Budget trusts it; any
//     other cached layer is unpacked again from the import's own bytes and
//     used only once they hash to its id;
//   - checks blob digests against the manifest (layout, registry) and the
//     uncompressed stream against the config's diffID (every source).
//
// Committing walks an upper dir the same way (fd-relative, never
// following symlinks) into a tar and feeds it to the same extractor.
//
// A layer is read in one pass (stream.go): a goroutine reads the blob (a
// registry's over HTTP/1.1, blobFetcher), hashes it for its digest,
// decompresses it and hashes the tar for its diffID, each byte once per
// digest and once in all for an uncompressed blob, which is its own tar;
// the caller extracts the tar as it arrives, starting each file's
// writeback as it writes it, so the syncfs before the rename has little
// left to write. Nothing of the blob is stored. A blob that fails to
// decode or to parse is read to its end and reported as a digest mismatch
// when it is one.
//
// Both digests cover the whole stream as served, the padding after a tar's
// end marker included; a mismatch names the layer ("layer 2 of 3
// (sha256:…)") and both digests. WithProgress reports each layer's bytes
// read for the import stream.
package image
