// build.mjs bundles the playground (GraphiQL, React and TaskFlow's example
// tabs) into one minified JS file and one CSS file under
// httpapi/playground/assets, which the Go server embeds. Run with
// `npm ci && npm run build` in web/playground and commit the result.
import * as esbuild from 'esbuild';
import { readFile, writeFile, unlink } from 'node:fs/promises';
import { gzipSync, constants } from 'node:zlib';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

const here = path.dirname(fileURLToPath(import.meta.url));
const outdir = path.resolve(here, '../../httpapi/playground/assets');

await esbuild.build({
  entryPoints: { playground: path.join(here, 'src/main.jsx') },
  bundle: true,
  minify: true,
  format: 'iife',
  target: ['es2020'],
  jsx: 'automatic',
  define: { 'process.env.NODE_ENV': '"production"' },
  legalComments: 'external',
  // Fonts and images referenced by the CSS stay inline (data: URLs), so the
  // page needs nothing but the two bundle files.
  loader: { '.woff2': 'dataurl', '.woff': 'dataurl', '.png': 'dataurl', '.svg': 'dataurl' },
  outdir,
  logLevel: 'info',
});

// The playground must work in a closed network: refuse a bundle that points at
// a CDN or loads anything from another origin.
const forbidden = /unpkg\.com|jsdelivr|cdnjs|esm\.sh|esm\.run|skypack|googleapis|gstatic/i;
for (const file of ['playground.js', 'playground.css']) {
  const text = await readFile(path.join(outdir, file), 'utf8');
  const m = text.match(forbidden);
  if (m) {
    console.error(`${file} references ${m[0]}: the playground must not load from a CDN`);
    process.exit(1);
  }
}

// Only the gzipped form is kept and embedded (the server decompresses it for
// the rare client that does not accept gzip): one copy of each file in git.
for (const file of ['playground.js', 'playground.css']) {
  const body = await readFile(path.join(outdir, file));
  await writeFile(path.join(outdir, file + '.gz'), gzipSync(body, { level: constants.Z_BEST_COMPRESSION, mtime: 0 }));
  await unlink(path.join(outdir, file));
}
