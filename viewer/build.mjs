// Builds the viewer into dist/: one ES module bundle (the page, and jco's
// transpiler for in-browser replay), its stylesheet and page, and the
// transpiler's core wasm, which the bundle loads beside itself. The output is
// deterministic (same sources and lockfile, same bytes): CI rebuilds it and
// fails if the committed dist/ differs.
import * as esbuild from 'esbuild';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const out = process.argv[2] ? path.resolve(process.argv[2]) : path.join(here, 'dist');
fs.rmSync(out, { recursive: true, force: true });
fs.mkdirSync(out, { recursive: true });

await esbuild.build({
  entryPoints: [path.join(here, 'src/main.ts')],
  bundle: true,
  format: 'esm',
  platform: 'browser',
  target: 'chrome120',
  minify: true,
  legalComments: 'none',
  charset: 'utf8',
  outfile: path.join(out, 'app.js'),
  logLevel: 'warning',
  // jco's transpiler reads its core wasm with node:fs only under Node.
  external: ['node:*'],
});
for (const f of ['index.html', 'app.css']) {
  fs.copyFileSync(path.join(here, 'src', f), path.join(out, f));
}
const vendor = path.join(here, 'node_modules/@bytecodealliance/jco-transpile/vendor');
for (const f of ['js-component-bindgen-component.core.wasm', 'js-component-bindgen-component.core2.wasm']) {
  fs.copyFileSync(path.join(vendor, f), path.join(out, f));
}
for (const f of fs.readdirSync(out).sort()) {
  console.log(`${f.padEnd(48)} ${fs.statSync(path.join(out, f)).size.toLocaleString('en')} bytes`);
}
