/**
 * The dashboard's files: built once by `npm run build` (scripts/build-dashboard.mjs bundles
 * src/dashboard/client with esbuild into dist/src/dashboard/assets), read into memory when the
 * plugin is registered, and served with their gzip form. Nothing is built or fetched at run time.
 */
import { createHash } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { gzipSync } from "node:zlib";

export interface Asset {
  body: Buffer;
  gzip: Buffer;
  type: string;
  /** Short content hash, for cache-busting URLs and ETags. */
  hash: string;
}

export const ASSET_FILES: Record<string, string> = {
  "app.js": "text/javascript; charset=utf-8",
  "app.css": "text/css; charset=utf-8",
};

/**
 * Where the bundle is: next to this module once compiled (dist/src/dashboard/assets); when
 * running from the sources (tsx, tests), the one the last `npm run build` wrote to dist/.
 */
export function assetDirectories(): string[] {
  return [fileURLToPath(new URL("./assets/", import.meta.url)), fileURLToPath(new URL("../../dist/src/dashboard/assets/", import.meta.url))];
}

/** The bundle's files, or null when `npm run build` has not been run. */
export function loadAssets(dirs: readonly string[] = assetDirectories()): Map<string, Asset> | null {
  const dir = dirs.find((d) => Object.keys(ASSET_FILES).every((f) => existsSync(`${d}${f}`)));
  if (dir === undefined) return null;
  const assets = new Map<string, Asset>();
  for (const [file, type] of Object.entries(ASSET_FILES)) {
    const body = readFileSync(`${dir}${file}`);
    assets.set(file, { body, gzip: gzipSync(body, { level: 9 }), type, hash: createHash("sha256").update(body).digest("base64url").slice(0, 12) });
  }
  return assets;
}
