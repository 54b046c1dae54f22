/** A JSON value: what a payload, a result or a progress report may hold. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
