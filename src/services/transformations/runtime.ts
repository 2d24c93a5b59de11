// What the transformation service is given to run the steps that are not declarative: the enrichment
// modules (user_agent, bot, geoip) and the sandbox that compiles user functions. Both are built by the
// composition root; a kind whose module is absent is refused at PUT.
import type { Enrichers, RunnableFunction, StepKind } from '../../domain/transform-types.js';

export type CompileResult = { ok: true; fn: RunnableFunction } | { ok: false; message: string; line?: number };

/** Compiles a `function` step's code once per version (the sandbox, with its CPU and memory limits). */
export interface FunctionCompiler {
  compile(code: string, productId: string): CompileResult;
}

export interface TransformRuntime {
  enrichers: Enrichers;
  functions?: FunctionCompiler;
}

/** Why a step of this kind cannot run on this server, or undefined. */
export function unavailableKind(kind: StepKind, runtime: TransformRuntime): string | undefined {
  const { enrichers } = runtime;
  if (kind === 'user_agent' && enrichers.userAgent === undefined)
    return 'user_agent steps are not available on this server';
  if (kind === 'bot' && enrichers.isBot === undefined) return 'bot steps are not available on this server';
  if (kind === 'function' && runtime.functions === undefined) return 'function steps are not available on this server';
  return undefined;
}
