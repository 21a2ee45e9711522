// Drives berth's code-interpreter template through the E2B door with the
// unmodified @e2b/code-interpreter SDK (its default template,
// code-interpreter-v1), configured only through the SDK's documented
// environment, and prints one JSON object of what it saw for
// test/e2e/e2b_test.go to judge. A step that throws ends the script with
// {"failure": ...}.
import { Sandbox } from '@e2b/code-interpreter'

const out = {}
try {
  const sbx = await Sandbox.create({ timeoutMs: 180_000 })
  out.id = sbx.sandboxId
  await sbx.runCode('x = 1')
  const two = await sbx.runCode('x + 1')
  out.two = two.text
  const plot = await sbx.runCode('import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.show()')
  out.png = plot.results.map((r) => (r.png || '').slice(0, 12)).join(',')
  const frame = await sbx.runCode('import pandas as pd\npd.DataFrame({"a": [1, 2], "b": [3, 4]})')
  out.frameHtml = (frame.results[0] && frame.results[0].html || '').includes('<table')
  out.frameText = frame.text || ''
  out.frameData = frame.results[0] && frame.results[0].data
  const str = await sbx.runCode("'hello' + ' there'")
  out.str = str.text
  const pil = await sbx.runCode('import numpy\nfrom PIL import Image\n' +
    'image = Image.fromarray((numpy.random.rand(8, 8, 3) * 255).astype("uint8"))\nimage.show()\nprint("done")')
  out.pilPng = pil.results.map((r) => (r.png || '').slice(0, 12)).join(',')
  const printed = await sbx.runCode('print("from-stdout")')
  out.stdout = printed.logs.stdout.join('')
  const boom = await sbx.runCode('1/0')
  out.error = boom.error ? { name: boom.error.name, value: boom.error.value, traceback: (boom.error.traceback || '').includes('ZeroDivisionError') } : null
  const began = Date.now()
  try {
    await sbx.runCode('import time\ntime.sleep(60)', { timeoutMs: 2000 })
    out.timeout = { thrown: false }
  } catch (e) {
    out.timeout = { thrown: true, name: e.name, ms: Date.now() - began }
  }
  const afterBegan = Date.now()
  const after = await sbx.runCode('x + 2')
  out.afterTimeout = after.text
  out.afterMs = Date.now() - afterBegan
  const ctx = await sbx.createCodeContext()
  const other = await sbx.runCode('x', { context: ctx })
  out.otherContext = other.error ? other.error.name : 'no error'
  out.contexts = (await sbx.listCodeContexts()).length
  await sbx.removeCodeContext(ctx)
  out.killed = await sbx.kill()
  out.ok = true
} catch (e) {
  out.failure = String(e && e.stack || e)
}
process.stdout.write(JSON.stringify(out))
