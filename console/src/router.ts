// Hash routes (#/p/<product>/events): the service serves one index.html, and no route needs the server.
import { useEffect, useState } from 'preact/hooks';

export function currentPath(): string {
  return decodeURI(window.location.hash.replace(/^#/, '')) || '/';
}

export function navigate(path: string): void {
  window.location.hash = path;
}

export function useRoute(): string[] {
  const [path, setPath] = useState(currentPath());
  useEffect(() => {
    const onChange = () => setPath(currentPath());
    window.addEventListener('hashchange', onChange);
    return () => window.removeEventListener('hashchange', onChange);
  }, []);
  return path.split('/').filter((part) => part !== '');
}
