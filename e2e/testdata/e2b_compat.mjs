// The E2B compatibility script: the official e2b SDK (installed by
// e2e/e2b_test.go into a temporary directory) against a live stead daemon
// (E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY). It throws on the first
// difference and prints one JSON line of ids for the Go side to check.
import { Sandbox, CommandExitError } from 'e2b'
import assert from 'node:assert/strict'

const step = (s) => console.error('step:', s)

step('create')
const sbx = await Sandbox.create({ metadata: { suite: 'e2b', run: 'one' }, envs: { GREETING: 'hello' }, timeoutMs: 600_000 })
assert.match(sbx.sandboxId, /^sb-/)

step('commands.run: stdout, stderr, env, streamed output')
const chunks = []
let r = await sbx.commands.run('echo $GREETING; echo oops >&2; echo $EXTRA', { envs: { EXTRA: 'per-command' }, onStdout: (d) => chunks.push(d) })
assert.equal(r.exitCode, 0)
assert.equal(r.stdout, 'hello\nper-command\n')
assert.equal(r.stderr, 'oops\n')
assert.equal(chunks.join(''), 'hello\nper-command\n')

step('commands.run: cwd, default home, users')
r = await sbx.commands.run('pwd', { cwd: '/tmp' })
assert.equal(r.stdout, '/tmp\n')
r = await sbx.commands.run('test "$(pwd -P)" = "$(readlink -f /home/user)" && echo home')
assert.equal(r.stdout, 'home\n')
assert.equal((await sbx.commands.run('id -u')).stdout, '1000\n')
assert.equal((await sbx.commands.run('id -u', { user: 'root' })).stdout, '0\n')

step('commands.run: a non-zero exit')
await assert.rejects(sbx.commands.run('echo partial; exit 3'), (e) => {
  assert.ok(e instanceof CommandExitError, String(e))
  assert.equal(e.exitCode, 3)
  assert.equal(e.stdout, 'partial\n')
  return true
})

step('commands.run: a timeout')
const t0 = Date.now()
await assert.rejects(sbx.commands.run('sleep 30', { timeoutMs: 1500 }))
assert.ok(Date.now() - t0 < 15_000, 'the timeout did not end the command')

step('files: text, binary, multi-file write, read')
await sbx.files.write('/home/user/a.txt', 'text from e2b')
assert.equal(await sbx.files.read('/home/user/a.txt'), 'text from e2b')
assert.equal((await sbx.commands.run('cat ~/a.txt')).stdout, 'text from e2b')
const bin = new Uint8Array([0, 1, 2, 253, 254, 255, 10, 13])
await sbx.files.write('rel/bin.dat', bin.buffer)
assert.deepEqual(await sbx.files.read('/home/user/rel/bin.dat', { format: 'bytes' }), bin)
const multi = await sbx.files.write([{ path: '/home/user/m/one.txt', data: '1' }, { path: '/home/user/m/two.txt', data: '22' }])
assert.equal(multi.length, 2)
assert.equal(await sbx.files.read('/home/user/m/two.txt'), '22')

step('files: list, exists, makeDir, rename, remove')
const names = (await sbx.files.list('/home/user')).map((e) => e.name)
for (const n of ['a.txt', 'rel', 'm']) assert.ok(names.includes(n), `list lacks ${n}: ${names}`)
const deep = (await sbx.files.list('/home/user', { depth: 2 })).map((e) => e.path)
assert.ok(deep.includes('/home/user/m/one.txt'), `depth 2 lacks m/one.txt: ${deep}`)
const a = (await sbx.files.list('/home/user')).find((e) => e.name === 'a.txt')
assert.equal(a.type, 'file')
assert.equal(a.size, 13)
assert.equal(await sbx.files.exists('/home/user/a.txt'), true)
assert.equal(await sbx.files.exists('/home/user/nope'), false)
assert.equal(await sbx.files.makeDir('/home/user/d/e'), true)
assert.equal(await sbx.files.makeDir('/home/user/d/e'), false)
const moved = await sbx.files.rename('/home/user/a.txt', '/home/user/d/b.txt')
assert.equal(moved.path, '/home/user/d/b.txt')
assert.equal(await sbx.files.exists('/home/user/a.txt'), false)
assert.equal(await sbx.files.read('/home/user/d/b.txt'), 'text from e2b')
await sbx.files.remove('/home/user/d')
assert.equal(await sbx.files.exists('/home/user/d'), false)
await assert.rejects(sbx.files.read('/home/user/nope.txt'), (e) => ['NotFoundError', 'FileNotFoundError'].includes(e.name))

step('pause, connect: the files are back')
await sbx.files.write('/home/user/keep.txt', 'kept across pause')
assert.equal(await sbx.pause(), true)
assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'paused')
assert.equal(await sbx.pause(), false) // already paused: 409
const again = await Sandbox.connect(sbx.sandboxId)
assert.equal((await again.getInfo()).state, 'running')
assert.equal(await again.files.read('/home/user/keep.txt'), 'kept across pause')
assert.equal((await again.commands.run('cat keep.txt')).stdout, 'kept across pause')
const connected = await Sandbox.connect(sbx.sandboxId) // running: 200
assert.equal(connected.sandboxId, sbx.sandboxId)

step('setTimeout, getInfo')
await again.setTimeout(120_000)
const info = await again.getInfo()
assert.deepEqual(info.metadata, { suite: 'e2b', run: 'one' })
assert.equal(info.templateId, 'base')

step('list with metadata and paging')
const other = await Sandbox.create({ metadata: { suite: 'e2b', run: 'two' } })
const found = await Sandbox.list({ query: { metadata: { suite: 'e2b', run: 'one' } } }).nextItems()
assert.deepEqual(found.map((s) => s.sandboxId), [sbx.sandboxId])
const pager = Sandbox.list({ query: { metadata: { suite: 'e2b' }, state: ['running'] }, limit: 1 })
const seen = []
while (pager.hasNext) {
  const items = await pager.nextItems()
  assert.ok(items.length <= 1)
  seen.push(...items.map((s) => s.sandboxId))
}
assert.deepEqual(seen.sort(), [sbx.sandboxId, other.sandboxId].sort())

step('kill')
assert.equal(await Sandbox.kill(other.sandboxId), true)
assert.equal(await Sandbox.kill(other.sandboxId), false)
await assert.rejects(Sandbox.getInfo(other.sandboxId), (e) => e.name === 'SandboxNotFoundError' || /not found/i.test(String(e)))

console.log(JSON.stringify({ id: sbx.sandboxId, killed: other.sandboxId, token: sbx.envdAccessToken ?? '' }))
