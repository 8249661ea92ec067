// The application entry point arrives with the desktop app; until then the target builds
// an empty program.
int main() { return 0; }
