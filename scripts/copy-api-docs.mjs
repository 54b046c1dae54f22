// Copies the interactive API docs' browser files (Swagger UI, from the swagger-ui-dist dev
// dependency) into dist/src/http/api-docs, so the package serves /docs from its own files: no
// CDN, nothing fetched at run time. src/http/api-docs.ts reads them from there.
import { copyFileSync, mkdirSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";

const require = createRequire(import.meta.url);
const from = dirname(require.resolve("swagger-ui-dist/package.json"));
const to = join("dist", "src", "http", "api-docs");
mkdirSync(to, { recursive: true });
for (const file of ["swagger-ui-bundle.js", "swagger-ui.css", "LICENSE", "NOTICE"]) copyFileSync(join(from, file), join(to, file));
