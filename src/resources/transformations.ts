// The public shape of a transformation version (transformations.md §3), for the admin API and the CLI.
import type { TransformationVersion } from '../storage/types.js';

export interface TransformationResource {
  version: number;
  steps: Array<Record<string, unknown>>;
  created_at: string;
}

export function transformationResource(v: TransformationVersion): TransformationResource {
  return { version: v.version, steps: v.steps as Array<Record<string, unknown>>, created_at: v.createdAt };
}
