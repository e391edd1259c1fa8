// Bundle src/editor.js (CodeMirror 6 and its Python mode) into app/static/build/editor.js, one file, no CDN,
// and copy Swagger UI's files for /docs into app/static/build/swagger/.
import { copyFile, mkdir, readFile } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

const here = (path) => fileURLToPath(new URL(path, import.meta.url));

// CodeMirror injects its base styles through style-mod, which uses a <style> element on a document and
// constructable style sheets only in shadow roots. gpulab's Content-Security-Policy (style-src 'self')
// blocks <style> elements, so let style-mod adopt a constructable sheet on the document too (browsers
// without adoptedStyleSheets still get the <style> element: the editor then works, unstyled).
const STYLE_MOD_TEST = "!root.head && root.adoptedStyleSheets && win.CSSStyleSheet";
const adoptSheetsOnDocument = {
  name: "style-mod-adopt-on-document",
  setup(build) {
    build.onLoad({ filter: /style-mod[\\/]src[\\/]style-mod\.js$/ }, async (args) => {
      const source = await readFile(args.path, "utf8");
      if (!source.includes(STYLE_MOD_TEST)) {
        throw new Error("style-mod changed: re-check the CSP patch in frontend/build.mjs");
      }
      return { contents: source.replace(STYLE_MOD_TEST, "root.adoptedStyleSheets && win.CSSStyleSheet"), loader: "js" };
    });
  },
};

await build({
  entryPoints: [here("./src/editor.js")],
  outfile: here("../app/static/build/editor.js"),
  bundle: true,
  minify: true,
  format: "iife",
  target: ["es2020"],
  legalComments: "eof", // keeps CodeMirror's MIT notices in the bundle
  logLevel: "warning",
  plugins: [adoptSheetsOnDocument],
});

// The API's OpenAPI page (/docs) uses Swagger UI 5 (OpenAPI 3.1); serve its files ourselves, never a CDN.
const SWAGGER_FILES = ["swagger-ui-bundle.js", "swagger-ui.css", "LICENSE", "NOTICE"];
await mkdir(here("../app/static/build/swagger"), { recursive: true });
for (const name of SWAGGER_FILES) {
  await copyFile(here(`./node_modules/swagger-ui-dist/${name}`), here(`../app/static/build/swagger/${name}`));
}
