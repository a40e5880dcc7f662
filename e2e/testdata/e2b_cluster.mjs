// Through a cluster node that does not own the sandbox (E2B_API_URL and
// E2B_SANDBOX_URL name it): the official SDK connects to the sandbox
// (E2B_SANDBOX_ID), runs a command, writes and reads a file, and starts,
// lists and kills a background process (the envd process table lives on
// the owner, so every call must reach it).
import { Sandbox } from 'e2b'
import assert from 'node:assert/strict'

const sbx = await Sandbox.connect(process.env.E2B_SANDBOX_ID)
const r = await sbx.commands.run('echo $STEAD_SANDBOX')
const body = 'written by the SDK through ' + process.env.VIA
await sbx.files.write('/home/user/sdk.txt', body)
assert.equal(await sbx.files.read('/home/user/sdk.txt'), body)
const h = await sbx.commands.run('sleep 60', { background: true })
const listed = await sbx.commands.list()
assert.ok(listed.some((p) => p.pid === h.pid), 'the background process is listed')
assert.equal(await h.kill(), true)
console.log(JSON.stringify({ out: r.stdout.trim(), pid: h.pid }))
