// What the transformation service is given to run the steps that are not declarative: the enrichment
// modules (user_agent, bot, geoip) and the sandbox that compiles user functions. Both are built by the
// composition root; a kind whose module is absent is refused at PUT.
import type { Enrichers, RunnableFunction, StepKind } from '../../domain/transform-types.js';
import type { Sandbox } from './sandbox.js';

export type CompileResult =
  { ok: true; fn: RunnableFunction & { dispose(): void } } | { ok: false; message: string; line?: number };

/** A compile failure as the compiler said it, with its line when it named one (`line 3: …`). */
export function compileFailure(compiled: { message: string; line?: number }): string {
  return compiled.line === undefined ? compiled.message : `line ${compiled.line}: ${compiled.message}`;
}

/** Compiles a `function` step's code once per version (the sandbox, with its CPU and memory limits). */
export interface FunctionCompiler {
  compile(code: string): Promise<CompileResult>;
  close(): Promise<void>;
}

/** The sandbox (`sandbox.ts`) as the compiler of function steps. */
export function sandboxCompiler(sandbox: Sandbox): FunctionCompiler {
  return {
    async compile(code) {
      const compiled = await sandbox.compile(code);
      if (!compiled.ok)
        return { ok: false, message: compiled.message, ...(compiled.line === null ? {} : { line: compiled.line }) };
      const { fn } = compiled;
      return {
        ok: true,
        fn: {
          runMany: (documents, meta) => fn.runMany(documents as unknown as Array<Record<string, unknown>>, meta),
          dispose: () => fn.dispose(),
        },
      };
    },
    close: () => sandbox.close(),
  };
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
  if (kind === 'geoip' && enrichers.geoip === undefined)
    return 'a geoip step needs a MaxMind database: set INLET_GEOIP_DATABASE on the server';
  if (kind === 'function' && runtime.functions === undefined) return 'function steps are not available on this server';
  return undefined;
}
