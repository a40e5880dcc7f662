// Background commands, stdin, re-attaching, kill, terminals and directory
// watches through the official e2b SDK against a live stead daemon (run by e2e/e2b_test.go).
// It throws on the first difference and prints one JSON line of ids.
import { Sandbox, CommandExitError } from 'e2b'
import assert from 'node:assert/strict'

const step = (s) => console.error('step:', s)
const until = async (what, fn, ms = 15_000) => {
  const end = Date.now() + ms
  for (;;) {
    if (await fn()) return
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 50))
  }
}

const sbx = await Sandbox.create({ metadata: { suite: 'e2b-process' } })

step('background: a handle at once, output streamed, wait for the end')
const out = []
const bg = await sbx.commands.run('echo started; sleep 1; echo done; exit 4', { background: true, onStdout: (d) => out.push(d) })
assert.ok(bg.pid > 0)
await until('the first output', () => out.join('').includes('started'))
assert.ok(!out.join('').includes('done'), 'run waited for the command')
await assert.rejects(bg.wait(), (e) => e instanceof CommandExitError && e.exitCode === 4 && e.stdout === 'started\ndone\n')

step('list, connect by pid from another client, kill')
const sleeper = await sbx.commands.run('for i in $(seq 1 600); do echo tick $i; sleep 0.1; done', { background: true })
const listed = await sbx.commands.list()
const mine = listed.find((p) => p.pid === sleeper.pid)
assert.ok(mine, `list lacks pid ${sleeper.pid}: ${JSON.stringify(listed)}`)
assert.equal(mine.cmd, '/bin/bash')
await sleeper.disconnect() // the command goes on without a watcher
const other = await Sandbox.connect(sbx.sandboxId)
const seen = []
const again = await other.commands.connect(sleeper.pid, { onStdout: (d) => seen.push(d) })
await until('output after re-attaching', () => seen.join('').includes('tick'))
assert.equal(await other.commands.kill(sleeper.pid), true)
await assert.rejects(again.wait(), (e) => e instanceof CommandExitError)
await until('the killed command to leave the list', async () => !(await sbx.commands.list()).some((p) => p.pid === sleeper.pid))
assert.equal(await sbx.commands.kill(sleeper.pid), false)
await assert.rejects(sbx.commands.connect(sleeper.pid))

step('stdin: send input, close it')
const cat = await sbx.commands.run('cat; echo eof', { background: true, stdin: true })
await sbx.commands.sendStdin(cat.pid, 'line one\n')
await cat.sendStdin('line two\n') // through the handle
await sbx.commands.closeStdin(cat.pid)
const catRes = await cat.wait()
assert.equal(catRes.stdout, 'line one\nline two\neof\n')
const noStdin = await sbx.commands.run('sleep 5', { background: true })
await assert.rejects(sbx.commands.sendStdin(noStdin.pid, 'x'))
await noStdin.kill()

step('pause → connect: a background command is back and goes on')
const counter = await sbx.commands.run('i=0; while :; do i=$((i+1)); echo $i > ~/count; sleep 0.1; done', { background: true })
const count = async (s) => Number((await s.files.read('/home/user/count').catch(() => '0')).trim())
await until('the counter to count', async () => (await count(sbx)) > 2)
assert.equal(await sbx.pause(), true)
const resumed = await Sandbox.connect(sbx.sandboxId)
assert.ok((await resumed.commands.list()).some((p) => p.pid === counter.pid), 'the background command is not listed after pause/connect')
const at = await count(resumed)
await until('the counter to go on', async () => (await count(resumed)) > at + 2)
assert.equal(await resumed.commands.kill(counter.pid), true)

step('pty: create, input, resize, kill')
const term = []
const pty = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => term.push(Buffer.from(d).toString()) })
await sbx.pty.sendInput(pty.pid, new TextEncoder().encode('stty size; echo pty-$((6*7))\n'))
await until('the terminal to answer', () => term.join('').includes('pty-42'))
assert.ok(term.join('').includes('24 80'), `stty size: ${term.join('')}`)
await sbx.pty.resize(pty.pid, { cols: 100, rows: 30 })
await sbx.pty.sendInput(pty.pid, new TextEncoder().encode('stty size\n'))
await until('the new size', () => term.join('').includes('30 100'))
assert.equal(await sbx.pty.kill(pty.pid), true)
await assert.rejects(pty.wait())

step('pty: exit ends it with its code')
const pty2 = await sbx.pty.create({ cols: 80, rows: 24, onData: () => {} })
await sbx.pty.sendInput(pty2.pid, new TextEncoder().encode('exit 0\n'))
const pres = await pty2.wait()
assert.equal(pres.exitCode, 0)

step('files.watchDir: changes in the directory, recursive, stop')
await sbx.files.makeDir('/home/user/watched/sub')
const changes = []
const watch = await sbx.files.watchDir('/home/user/watched', (e) => changes.push(e), { recursive: true })
await sbx.files.write('/home/user/watched/a.txt', 'one')
await sbx.commands.run('echo more >> ~/watched/a.txt; mkdir ~/watched/sub/deeper; touch ~/watched/sub/deeper/b.txt; mv ~/watched/a.txt ~/watched/c.txt; rm ~/watched/c.txt')
const saw = (name, type) => changes.some((e) => e.name === name && e.type === type)
await until('the watch events', () => saw('c.txt', 'remove'))
for (const [name, type] of [['a.txt', 'create'], ['a.txt', 'write'], ['sub/deeper', 'create'], ['sub/deeper/b.txt', 'create'], ['a.txt', 'rename'], ['c.txt', 'create']]) {
  assert.ok(saw(name, type), `no ${type} of ${name} in ${JSON.stringify(changes)}`)
}
await watch.stop()
const before = changes.length
await sbx.files.write('/home/user/watched/after-stop.txt', 'x')
await new Promise((r) => setTimeout(r, 300))
assert.equal(changes.length, before, 'events after stop')
await assert.rejects(sbx.files.watchDir('/home/user/no-such-dir', () => {}))

step('getMetrics: CPU, memory and disk from the cgroup and the dataset')
const burner = await sbx.commands.run('timeout 4 sh -c "while :; do :; done"', { background: true })
await new Promise((r) => setTimeout(r, 1000))
const metrics = await sbx.getMetrics()
assert.equal(metrics.length, 1, JSON.stringify(metrics))
const m = metrics[0]
assert.ok(m.timestamp instanceof Date && Math.abs(m.timestamp - Date.now()) < 60_000, String(m.timestamp))
assert.ok(m.cpuCount >= 1 && m.cpuUsedPct > 5 && m.cpuUsedPct <= 100, `cpu: ${JSON.stringify(m)}`)
assert.ok(m.memUsed > 0 && m.memTotal >= m.memUsed, `memory: ${JSON.stringify(m)}`)
assert.ok(m.diskUsed > 0 && m.diskTotal >= m.diskUsed, `disk: ${JSON.stringify(m)}`)
await burner.kill()
assert.deepEqual(await Sandbox.getMetrics(sbx.sandboxId, { end: new Date(Date.now() - 3_600_000) }), [])

step('snapshots: create, list, a sandbox from one, delete')
await sbx.files.write('/home/user/snap.txt', 'in the snapshot')
const snap = await sbx.createSnapshot({ name: 'e2b-snap' })
assert.match(snap.snapshotId, /^snap-/)
assert.deepEqual(snap.names, ['e2b-snap'])
await sbx.files.write('/home/user/snap.txt', 'after the snapshot')
const snaps = await Sandbox.listSnapshots({ sandboxId: sbx.sandboxId }).nextItems()
assert.deepEqual(snaps.map((s) => s.snapshotId), [snap.snapshotId])
assert.deepEqual(await Sandbox.listSnapshots({ name: 'no-such-name' }).nextItems(), [])
const fromSnap = await Sandbox.create(snap.snapshotId)
assert.notEqual(fromSnap.sandboxId, sbx.sandboxId)
assert.equal(await fromSnap.files.read('/home/user/snap.txt'), 'in the snapshot')
assert.equal((await fromSnap.commands.run('cat ~/snap.txt')).stdout, 'in the snapshot')

step('fork: running copies of the sandbox')
const forks = await sbx.fork({ count: 2, timeoutMs: 120_000 })
assert.equal(forks.length, 2)
for (const f of forks) {
  assert.ok(f instanceof Sandbox, String(f))
  assert.equal((await f.getInfo()).state, 'running')
  assert.equal(await f.files.read('/home/user/snap.txt'), 'after the snapshot')
}
await forks[0].files.write('/home/user/snap.txt', 'changed in a fork')
assert.equal(await sbx.files.read('/home/user/snap.txt'), 'after the snapshot')
assert.equal(await forks[1].files.read('/home/user/snap.txt'), 'after the snapshot')
assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), true)
assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), false)
assert.equal(await fromSnap.files.read('/home/user/snap.txt'), 'in the snapshot')

console.log(JSON.stringify({ id: sbx.sandboxId, forks: forks.map((f) => f.sandboxId), fromSnapshot: fromSnap.sandboxId }))
