// Build a JavaScript controller: bundle APP with this SDK (esbuild; the
// WIT imports stay imports), then componentize-js against cairn's WIT,
// world `agent`, with componentize-js's default features (`fetch`).
//
//   node guest-sdk-js/build.mjs app.js out.wasm [--wit path/to/cairn/wit]
import { componentize } from '@bytecodealliance/componentize-js';
import * as esbuild from 'esbuild';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const args = process.argv.slice(2);
const witAt = args.indexOf('--wit');
const wit = witAt >= 0 ? args.splice(witAt, 2)[1] : path.join(here, '../wit');
const [app, out] = args;
if (!app || !out) {
  console.error('usage: node build.mjs app.js out.wasm [--wit DIR]');
  process.exit(2);
}
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cairn-js-'));
const bundle = path.join(dir, 'bundle.js');
await esbuild.build({
  entryPoints: [app],
  bundle: true,
  format: 'esm',
  platform: 'neutral',
  outfile: bundle,
  external: ['cairn:*', 'wasi:*'],
  alias: { 'cairn-sdk': path.join(here, 'cairn.js') },
  logLevel: 'warning',
});
const { component } = await componentize({
  sourcePath: bundle,
  witPath: wit,
  worldName: 'agent',
  // componentize-js's defaults: `fetch` over wasi:http, which cairn
  // provides (gated by the workspace's allowed_outbound_hosts).
});
fs.writeFileSync(out, component);
fs.rmSync(dir, { recursive: true, force: true });
console.log(`${out}: ${component.length.toLocaleString('en')} bytes`);
