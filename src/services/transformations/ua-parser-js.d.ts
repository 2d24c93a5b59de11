// ua-parser-js 1.x ships no types (2.x does, under the AGPL); only what the `user_agent` step calls.
declare module 'ua-parser-js' {
  interface UAParserResult {
    browser: { name?: string; version?: string; major?: string };
    os: { name?: string; version?: string };
    device: { type?: string; vendor?: string; model?: string };
  }
  function UAParser(userAgent: string): UAParserResult;
  export default UAParser;
}
