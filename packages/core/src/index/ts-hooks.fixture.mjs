// Module hooks that let a plain `node` child process import this package's TypeScript sources (for the
// crash test's writer process): `.ts` files are transpiled with TypeScript's transpileModule, and `./x.js`
// specifiers fall back to `./x.ts` as in the sources. Start node with --conditions=source.
import fs from 'node:fs';
import ts from 'typescript';

export async function resolve(specifier, context, next) {
  try {
    return await next(specifier, context);
  } catch (error) {
    if ((specifier.startsWith('./') || specifier.startsWith('../')) && specifier.endsWith('.js')) {
      return next(`${specifier.slice(0, -3)}.ts`, context);
    }
    throw error;
  }
}

export async function load(url, context, next) {
  if (!url.endsWith('.ts')) return next(url, context);
  const source = fs.readFileSync(new URL(url), 'utf8');
  const out = ts.transpileModule(source, {
    fileName: url,
    compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022, sourceMap: false },
  });
  return { format: 'module', source: out.outputText, shortCircuit: true };
}
