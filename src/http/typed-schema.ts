/**
 * One definition per HTTP shape: each schema is built with TypeBox, which gives both the JSON
 * Schema object (what the routes validate with and the OpenAPI document publishes) and, through
 * `Static<typeof schema>`, its TypeScript type. So a field added to a view is added once, and the
 * type and the published schema cannot drift apart.
 *
 * TypeBox's own builders cover most shapes. The helpers below spell the few the API has always
 * published in a form TypeBox writes differently, so the published document keeps its shape:
 * a nullable value as `type: [T, "null"]` (TypeBox would write `anyOf`), a string enum as
 * `enum` (TypeBox: an `anyOf` of `const`s), and "any JSON value" typed as Json, not unknown.
 */
import { Type, type SchemaOptions, type Static, type TSchema, type TUnsafe } from "@sinclair/typebox";
import type { Json } from "../core/json.js";
import { shown } from "../core/checks.js";

export { Type, type Static, type TSchema };

/** `schema` or null, as `{ type: [<its type>, "null"], … }`. */
export function Nullable<T extends TSchema>(schema: T, options: SchemaOptions = {}): TUnsafe<Static<T> | null> {
  const type = (schema as { type?: unknown }).type;
  if (typeof type !== "string") throw new Error(`Nullable() takes a schema with one type; got ${shown(type)}`);
  return Type.Unsafe<Static<T> | null>({ ...schema, type: [type, "null"], ...options });
}

/** One of `values`, as `{ type: "string", enum: values }`. */
export function StringEnum<const V extends readonly string[]>(values: V, options: SchemaOptions = {}): TUnsafe<V[number]> {
  return Type.Unsafe<V[number]>({ type: "string", enum: values, ...options });
}

/** Any JSON value (a schema with no constraint). */
export function AnyJson(options: SchemaOptions = {}): TUnsafe<Json> {
  return Type.Unsafe<Json>({ ...options });
}
