// A ustar archive writer for a Dockerfile build's context: the console
// packs the files a person picked (and the Dockerfile typed in) into the
// tar archive POST /v1/templates/{name}/dockerfile takes. Regular files
// only, mode 0644, owner 0, time 0: the same files give the same bytes.

export type TarEntry = { name: string; data: Uint8Array };

const enc = new TextEncoder();

/** A context path as the archive holds it, or an error in words. */
export function tarPath(name: string): string {
  const parts = name.replace(/\\/g, "/").split("/").filter((p) => p !== "" && p !== ".");
  if (!parts.length) throw new Error("a file of the context has no name");
  if (parts.includes("..")) throw new Error(`“${name}” leaves the context (..)`);
  const p = parts.join("/");
  if (enc.encode(p).length > 255) throw new Error(`“${name}” is longer than 255 bytes`);
  return p;
}

function put(h: Uint8Array, off: number, len: number, s: string) {
  const b = enc.encode(s);
  if (b.length > len) throw new Error("tar: field too long: " + s);
  h.set(b, off);
}

const octal = (n: number, width: number) => n.toString(8).padStart(width - 1, "0") + "\0";

function header(path: string, size: number): Uint8Array {
  const h = new Uint8Array(512);
  let name = path;
  let prefix = "";
  if (enc.encode(path).length > 100) {
    // ustar: the name's last part in name, what leads to it in prefix.
    const i = path.lastIndexOf("/", path.length - 1);
    let cut = -1;
    for (let j = i; j > 0; j = path.lastIndexOf("/", j - 1)) {
      if (enc.encode(path.slice(j + 1)).length <= 100 && enc.encode(path.slice(0, j)).length <= 155) {
        cut = j;
        break;
      }
    }
    if (cut < 0) throw new Error(`“${path}” cannot be stored in a tar header`);
    name = path.slice(cut + 1);
    prefix = path.slice(0, cut);
  }
  if (size > 0o77777777777) throw new Error(`“${path}” is too large`);
  put(h, 0, 100, name);
  put(h, 100, 8, "0000644\0");
  put(h, 108, 8, "0000000\0");
  put(h, 116, 8, "0000000\0");
  put(h, 124, 12, octal(size, 12));
  put(h, 136, 12, octal(0, 12));
  put(h, 148, 8, "        ");
  put(h, 156, 1, "0");
  put(h, 257, 6, "ustar\0");
  put(h, 263, 2, "00");
  put(h, 345, 155, prefix);
  let sum = 0;
  for (const b of h) sum += b;
  put(h, 148, 8, sum.toString(8).padStart(6, "0") + "\0 ");
  return h;
}

/** The archive of entries (later entries of the same path replace earlier ones). */
export function tar(entries: TarEntry[]): Uint8Array {
  const byPath = new Map<string, Uint8Array>();
  for (const e of entries) byPath.set(tarPath(e.name), e.data);
  let size = 1024;
  for (const d of byPath.values()) size += 512 + Math.ceil(d.length / 512) * 512;
  const out = new Uint8Array(size);
  let off = 0;
  for (const [p, d] of byPath) {
    out.set(header(p, d.length), off);
    off += 512;
    out.set(d, off);
    off += Math.ceil(d.length / 512) * 512;
  }
  return out; // the two zero blocks that end it are the array's zeros
}
