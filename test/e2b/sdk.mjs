// Drives berth's E2B door with the unmodified e2b SDK, configured only
// through its documented environment (E2B_API_URL, E2B_SANDBOX_URL,
// E2B_API_KEY), and prints one JSON object of what it saw for
// test/e2e/e2b_test.go to judge. A step that throws ends the script with
// {"error": ...}.
import { Sandbox, CommandExitError } from 'e2b'

const out = {}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))
async function until(what, fn, ms = 15000) {
  const end = Date.now() + ms
  for (;;) {
    const v = await fn()
    if (v) return v
    if (Date.now() > end) throw new Error('timed out waiting for ' + what)
    await sleep(100)
  }
}

try {
  const sbx = await Sandbox.create({ timeoutMs: 120_000, metadata: { suite: 'berth-e2e' }, envs: { AT_CREATE: 'c1' } })
  out.id = sbx.sandboxId

  const r = await sbx.commands.run('echo hello; echo oops >&2')
  out.run = { stdout: r.stdout, stderr: r.stderr, exitCode: r.exitCode }
  const env = await sbx.commands.run('echo $AT_CREATE $AT_RUN; pwd; id -u', { envs: { AT_RUN: 'r1' }, cwd: '/tmp', user: 'root' })
  out.env = env.stdout
  try {
    await sbx.commands.run('echo partial; exit 3')
    out.fail = { thrown: false }
  } catch (e) {
    out.fail = { thrown: true, commandExitError: e instanceof CommandExitError, exitCode: e.exitCode, stdout: e.stdout }
  }

  // A background command: listed, connected to, fed stdin, killed.
  const bg = await sbx.commands.run('read line; echo got:$line; sleep 600', { background: true, stdin: true })
  const listed = await sbx.commands.list()
  let seen = ''
  const conn = await sbx.commands.connect(bg.pid, { onStdout: (d) => { seen += d } })
  await sbx.commands.sendStdin(bg.pid, 'ping\n')
  await until('the background output', async () => seen.includes('got:ping'))
  const killed = await sbx.commands.kill(bg.pid)
  const ended = await conn.wait().then(() => 'exited', (e) => e.constructor.name)
  const after = await sbx.commands.list()
  out.bg = {
    pid: bg.pid, listed: listed.some((p) => p.pid === bg.pid), seen, killed, ended,
    gone: !after.some((p) => p.pid === bg.pid),
  }

  // A PTY: an interactive shell, typed into, its echo read back.
  let tty = ''
  const term = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => { tty += new TextDecoder().decode(d) } })
  await sbx.pty.sendInput(term.pid, new TextEncoder().encode('echo pty-$((6*7))\n'))
  await until('the PTY output', async () => tty.includes('pty-42'))
  await sbx.pty.resize(term.pid, { cols: 101, rows: 33 })
  await sbx.pty.sendInput(term.pid, new TextEncoder().encode('stty size\n'))
  await until('the resized PTY', async () => tty.includes('33 101'))
  out.pty = { pid: term.pid, seen: tty.includes('pty-42'), killed: await sbx.pty.kill(term.pid) }

  // Files.
  const dir = '/tmp/e2b'
  await sbx.files.makeDir(dir)
  const events = []
  const watch = await sbx.files.watchDir(dir, (ev) => events.push({ name: ev.name, type: ev.type }))
  await sbx.files.write(dir + '/a.txt', 'content of a')
  const read = await sbx.files.read(dir + '/a.txt')
  const madeDir = await sbx.files.makeDir(dir + '/sub')
  const madeAgain = await sbx.files.makeDir(dir + '/sub')
  await sbx.files.rename(dir + '/a.txt', dir + '/b.txt')
  const names = (await sbx.files.list(dir)).map((e) => e.name + ':' + e.type).sort()
  const existsA = await sbx.files.exists(dir + '/a.txt')
  await sbx.files.remove(dir + '/b.txt')
  const existsB = await sbx.files.exists(dir + '/b.txt')
  await until('watch events', async () => events.some((e) => e.name === 'a.txt' && e.type === 'write') &&
    events.some((e) => e.name === 'b.txt' && e.type === 'remove'))
  await watch.stop()
  out.files = { read, madeDir, madeAgain, names, existsA, existsB, events }

  // Timeout.
  await sbx.setTimeout(90_000)
  const info = await sbx.getInfo()
  out.timeout = { secondsLeft: Math.round((info.endAt.getTime() - Date.now()) / 1000), state: info.state }

  // Pause, then connect: files and a running process are still there.
  await sbx.files.write('/root/kept.txt', 'kept')
  const sleeper = await sbx.commands.run('sleep 600', { background: true })
  const paused = await sbx.pause()
  const pausedInfo = await Sandbox.getInfo(sbx.sandboxId)
  const again = await Sandbox.connect(sbx.sandboxId)
  out.pause = {
    paused, state: pausedInfo.state,
    kept: await again.files.read('/root/kept.txt'),
    sleeper: (await again.commands.list()).some((p) => p.pid === sleeper.pid),
    stateAfter: (await again.getInfo()).state,
  }

  // Fork: the child starts from the parent's files, and writes apart.
  const [child] = await again.fork({ timeoutMs: 60_000 })
  await child.files.write('/root/child.txt', 'only in the child')
  out.fork = {
    id: child.sandboxId,
    kept: await child.files.read('/root/kept.txt'),
    parentHasChild: await again.files.exists('/root/child.txt'),
    killed: await child.kill(),
  }

  // Snapshots: taken, listed, a sandbox made from one, deleted.
  const snap = await again.createSnapshot()
  const snaps = await Sandbox.listSnapshots({ sandboxId: again.sandboxId }).nextItems()
  const fromSnap = await Sandbox.create(snap.snapshotId, { timeoutMs: 60_000 })
  out.snapshot = {
    id: snap.snapshotId,
    listed: snaps.some((s) => s.snapshotId === snap.snapshotId),
    kept: await fromSnap.files.read('/root/kept.txt'),
    killed: await fromSnap.kill(),
    deleted: await Sandbox.deleteSnapshot(snap.snapshotId),
    deletedAgain: await Sandbox.deleteSnapshot(snap.snapshotId),
  }

  // List, by metadata and state.
  const page = await Sandbox.list({ query: { metadata: { suite: 'berth-e2e' }, state: ['running'] } }).nextItems()
  const none = await Sandbox.list({ query: { metadata: { suite: 'nobody' } } }).nextItems()
  out.list = { ids: page.map((s) => s.sandboxId), metadata: page[0]?.metadata, none: none.length }

  try {
    await Sandbox.create('no-such-template')
    out.unknownTemplate = 'created'
  } catch (e) {
    out.unknownTemplate = e.constructor.name + ': ' + e.message
  }

  out.killed = await again.kill()
  out.killedAgain = await Sandbox.kill(sbx.sandboxId)
  try {
    await Sandbox.getInfo(sbx.sandboxId)
    out.afterKill = 'found'
  } catch (e) {
    out.afterKill = e.constructor.name
  }
  out.ok = true
} catch (e) {
  out.error = String(e && e.stack || e)
}
process.stdout.write(JSON.stringify(out))
