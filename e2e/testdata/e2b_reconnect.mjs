// After a kill -9 and a restart of the daemon: the official SDK connects
// to the sandbox it made before (E2B_SANDBOX_ID) and finds its files.
import { Sandbox } from 'e2b'
import assert from 'node:assert/strict'

const sbx = await Sandbox.connect(process.env.E2B_SANDBOX_ID)
assert.equal(await sbx.files.read('/home/user/keep.txt'), 'kept across pause')
assert.equal(await sbx.files.read('/home/user/m/two.txt'), '22')
assert.equal((await sbx.commands.run('cat ~/rel/bin.dat | od -An -tu1 | tr -s " "')).stdout.trim(), '0 1 2 253 254 255 10 13')
console.log('ok')
