// Test-only name resolution, loaded with `node --import ./resolve.mjs`:
// every name under $BERTH_TEST_DOMAIN resolves to 127.0.0.1, as an
// /etc/hosts wildcard would, without editing system files. The test runs
// node in a network namespace it made, holding only loopback, so nothing
// this resolves (or fails to) can leave the machine. The SDK itself is
// unmodified: it only sees E2B_DOMAIN.
import dns from 'node:dns'

const domain = (process.env.BERTH_TEST_DOMAIN || '').toLowerCase()
const lookup = dns.lookup
dns.lookup = function (host, opts, cb) {
  if (typeof opts === 'function') { cb = opts; opts = {} }
  if (typeof opts === 'number') opts = { family: opts }
  const h = String(host).toLowerCase().replace(/\.$/, '')
  if (domain && (h === domain || h.endsWith('.' + domain))) {
    if (opts && opts.all) return process.nextTick(cb, null, [{ address: '127.0.0.1', family: 4 }])
    return process.nextTick(cb, null, '127.0.0.1', 4)
  }
  return lookup.call(this, host, opts, cb)
}
