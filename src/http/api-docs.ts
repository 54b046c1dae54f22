/**
 * Interactive API docs at `<basePath>/docs`: Swagger UI over this server's own OpenAPI document,
 * from files the package ships (`npm run build` copies them from swagger-ui-dist into
 * dist/src/http/api-docs; see scripts/copy-api-docs.mjs). Nothing comes from a CDN, so the page
 * works on a network without Internet access and under a strict Content-Security-Policy.
 */
import { existsSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { gzipSync } from "node:zlib";

export interface DocsAsset {
  body: Buffer;
  gzip: Buffer;
  type: string;
}

const FILES: Record<string, string> = {
  "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
  "swagger-ui.css": "text/css; charset=utf-8",
};

/** Where the files are: beside this module once built; from swagger-ui-dist when run from the sources. */
function directories(): string[] {
  const dirs = [fileURLToPath(new URL("./api-docs/", import.meta.url))];
  try {
    dirs.push(dirname(createRequire(import.meta.url).resolve("swagger-ui-dist/package.json")));
  } catch {
    // Not installed (an installed package has the built copy instead).
  }
  return dirs;
}

/** The page's files, or null when neither a build nor swagger-ui-dist provides them. */
export function loadDocsAssets(basePath: string): Map<string, DocsAsset> | null {
  const dir = directories().find((d) => Object.keys(FILES).every((f) => existsSync(join(d, f))));
  if (dir === undefined) return null;
  const assets = new Map<string, DocsAsset>();
  const add = (file: string, body: Buffer, type: string) => assets.set(file, { body, gzip: gzipSync(body), type });
  for (const [file, type] of Object.entries(FILES)) add(file, readFileSync(join(dir, file)), type);
  const openapi = `${basePath}/openapi.json`;
  // A file of its own rather than an inline script, so the page's CSP can forbid inline scripts.
  add(
    "init.js",
    Buffer.from(`window.ui = SwaggerUIBundle({ url: ${JSON.stringify(openapi)}, dom_id: "#swagger-ui", deepLinking: true, persistAuthorization: false });\n`),
    "text/javascript; charset=utf-8",
  );
  return assets;
}

/** The page itself; asset URLs are relative to `<basePath>/docs`, so any mount prefix works. */
export function docsPage(basePath: string): string {
  const base = `${basePath}/docs/`;
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Conveyor API</title>
<link rel="stylesheet" href="${base}swagger-ui.css">
</head>
<body>
<div id="swagger-ui"></div>
<script src="${base}swagger-ui-bundle.js"></script>
<script src="${base}init.js"></script>
</body>
</html>
`;
}

/** Swagger UI styles elements inline and shows data: images; everything else only from here. */
export const DOCS_CSP =
  "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'";
