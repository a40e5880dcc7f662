// E2B network rules through the official e2b SDK against a live stead
// daemon with networking, whose internet is the test's stand-in
// (e2e/e2b_test.go passes its two web addresses as WEB and WEB2).
import { Sandbox, ALL_TRAFFIC } from 'e2b'
import assert from 'node:assert/strict'

const step = (s) => console.error('step:', s)
const { WEB, WEB2 } = process.env
const reach = async (sbx, addr) => (await sbx.commands.run(`curl -sS --max-time 4 http://${addr}/ >/dev/null 2>&1 && echo yes || echo no`)).stdout.trim() === 'yes'

step('default: the internet')
const open = await Sandbox.create()
assert.equal(await reach(open, WEB), true)
assert.equal(await reach(open, WEB2), true)

step('allowInternetAccess: false')
const closed = await Sandbox.create({ allowInternetAccess: false })
assert.equal(await reach(closed, WEB), false)
assert.equal(await reach(closed, WEB2), false)

step('deny all traffic but one address')
const allowOne = await Sandbox.create({ network: { denyOut: [ALL_TRAFFIC], allowOut: [WEB] } })
assert.equal(await reach(allowOne, WEB), true)
assert.equal(await reach(allowOne, WEB2), false)

step('updateNetwork: deny one address, at once')
await open.updateNetwork({ denyOut: [WEB2] })
assert.equal(await reach(open, WEB), true)
assert.equal(await reach(open, WEB2), false)
await open.updateNetwork({ allowInternetAccess: false })
assert.equal(await reach(open, WEB), false)
await open.updateNetwork({})
assert.equal(await reach(open, WEB), true)
assert.equal(await reach(open, WEB2), true)

console.log(JSON.stringify({ open: open.sandboxId, closed: closed.sandboxId, allowOne: allowOne.sandboxId }))
