// E2B's template tags through berth's door, with the unmodified e2b SDK:
// a build named name:tag (and given more tags), Template.exists of a
// name and of its tags, sandboxes of a tag, assignTags (a new tag, and
// one moved to a later build), getTags, removeTags, and what is refused.
// Prints one JSON object for test/e2e/e2b_template_test.go.
import { Sandbox, Template } from 'e2b'

const out = {}
const name = process.env.TEMPLATE_NAME
const opts = { cpuCount: 1, memoryMB: 1024 }
// What a sandbox of ref finds in the file its build wrote.
async function content(ref) {
  const sbx = await Sandbox.create(ref, { timeoutMs: 60_000 })
  try {
    return (await sbx.commands.run('cat /etc/which-build', { user: 'root' })).stdout.trim()
  } finally {
    await sbx.kill()
  }
}
const refused = async (p) => { try { await p; return false } catch { return true } }
try {
  const v1 = await Template.build(Template().fromBaseImage().runCmd('echo v1 > /etc/which-build', { user: 'root' }), `${name}:v1`, opts)
  out.v1 = { templateId: v1.templateId, buildId: v1.buildId }
  out.exists = { tag: await Template.exists(`${name}:v1`), name: await Template.exists(name), otherTag: await Template.exists(`${name}:nope`) }
  out.v1Content = await content(`${name}:v1`)
  const assigned = await Template.assignTags(`${name}:v1`, ['production', 'latest'])
  out.assigned = { sameBuild: assigned.buildId === v1.buildId, tags: assigned.tags }
  out.production = await content(`${name}:production`)
  // A second build with a tag of its name and one more from the options.
  const v2 = await Template.build(Template().fromTemplate(`${name}:v1`).runCmd('echo v2 > /etc/which-build', { user: 'root' }), `${name}:v2`, { ...opts, tags: ['stable'] })
  out.stable = await content(`${name}:stable`)
  const moved = await Template.assignTags(`${name}:v2`, 'latest')
  out.movedSameBuild = moved.buildId === v2.buildId
  out.latest = await content(`${name}:latest`)
  await Template.removeTags(name, 'production')
  const tags = await Template.getTags(name)
  out.tags = tags.map((t) => `${t.tag}=${t.buildId === v1.buildId ? 'v1' : t.buildId === v2.buildId ? 'v2' : t.buildId}`).sort()
  out.datesOK = tags.every((t) => t.createdAt instanceof Date && !isNaN(t.createdAt))
  out.removedGone = await refused(Sandbox.create(`${name}:production`, { timeoutMs: 60_000 }))
  out.refused = {
    missingName: await refused(Template.assignTags(`${name}:v1`, ':bad')),
    missingTag: await refused(Template.assignTags(`${name}:v1`, `${name}:`)),
    unknownTemplate: await refused(Template.removeTags(`${name}-nope`, ['x'])),
    unknownTags: await refused(Template.getTags(`${name}-nope`)),
    rebuild: await refused(Template.build(Template().fromBaseImage(), `${name}:v1`, opts)),
  }
  out.v2 = { templateId: v2.templateId, buildId: v2.buildId }
  out.ok = true
} catch (e) {
  out.error = `${e && e.name}: ${e && e.message} ${e && e.stack}`
}
process.stdout.write(JSON.stringify(out))
