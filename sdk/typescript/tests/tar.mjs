// A minimal ustar writer for the tests (an uncompressed archive of
// name -> content), and a docker-save tarball of one layer made with it,
// so the template tests need no registry and no npm package.
import { createHash } from "node:crypto";

function header(name, size) {
  const h = Buffer.alloc(512);
  h.write(name, 0, 100, "utf8");
  h.write("0000644\0", 100);
  h.write("0000000\0", 108);
  h.write("0000000\0", 116);
  h.write(size.toString(8).padStart(11, "0") + "\0", 124);
  h.write("00000000000\0", 136);
  h.write("        ", 148); // the checksum's place counts as spaces
  h.write("0", 156);
  h.write("ustar\0", 257);
  h.write("00", 263);
  let sum = 0;
  for (const b of h) sum += b;
  h.write(sum.toString(8).padStart(6, "0") + "\0 ", 148);
  return h;
}

export function tarOf(files) {
  const parts = [];
  for (const [name, content] of Object.entries(files)) {
    const data = Buffer.from(content);
    parts.push(header(name, data.length), data, Buffer.alloc((512 - (data.length % 512)) % 512));
  }
  parts.push(Buffer.alloc(1024));
  return Buffer.concat(parts);
}

export function dockerSave(files, env = ["PATH=/bin"]) {
  const layer = tarOf(files);
  const diffID = "sha256:" + createHash("sha256").update(layer).digest("hex");
  const config = Buffer.from(
    JSON.stringify({ architecture: "amd64", os: "linux", config: { Env: env, WorkingDir: "/" }, rootfs: { type: "layers", diff_ids: [diffID] } }),
  );
  const configName = createHash("sha256").update(config).digest("hex") + ".json";
  const manifest = JSON.stringify([{ Config: configName, RepoTags: ["example.test/sdk:1"], Layers: ["layer.tar"] }]);
  return tarOf({ "manifest.json": manifest, [configName]: config, "layer.tar": layer });
}
