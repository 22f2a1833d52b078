package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/rlnode/rlnode/recipes"
	"github.com/rlnode/rlnode/train"
)

func init() { commands["recipe"] = recipeCommand }

const recipeUsage = `usage:
  rlnode recipe list
      the built-in recipes
  rlnode recipe show NAME|FILE [--resolved] [--set KEY.PATH=VALUE]...
      print a recipe: the file as written, or with --resolved every default
      filled in (what a run directory keeps); --set implies --resolved
  rlnode recipe validate NAME|FILE [--set KEY.PATH=VALUE]...
      check a recipe as rlnode run and rlnode sbatch do before they start:
      every problem is printed as FILE:LINE: field.path: message, exit
      status 1 when there is any

The schema: recipes/SCHEMA.md.
`

func recipeCommand(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, recipeUsage)
		return 0
	}
	switch args[0] {
	case "list":
		return recipeList(args[1:], stdout, stderr)
	case "show", "validate":
		return recipeShowValidate(args[0], args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "rlnode recipe: unknown subcommand %q\n\n%s", args[0], recipeUsage)
	return 2
}

// parseInterleaved parses flags given before, between or after positional
// arguments and returns the positional ones.
// parseCommand is parseInterleaved with the exit codes every command
// uses: ok false means stop with code (0 after -h, 2 on a flag error,
// which the flag set has already printed).
func parseCommand(fs *flag.FlagSet, args []string) (pos []string, code int, ok bool) {
	pos, err := parseInterleaved(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return nil, 0, false
	}
	if err != nil {
		return nil, 2, false
	}
	return pos, 0, true
}

func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return positional, nil
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func recipeList(args []string, stdout, stderr io.Writer) int {
	if len(args) == 1 && (args[0] == "-h" || args[0] == "--help") {
		fmt.Fprint(stdout, recipeUsage)
		return 0
	}
	if len(args) > 0 {
		fmt.Fprintf(stderr, "rlnode recipe list: unexpected argument %q\n", args[0])
		return 2
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tDESCRIPTION")
	for _, name := range recipes.BuiltinNames() {
		l, err := recipes.Load(name, nil)
		if err != nil {
			fmt.Fprintf(stderr, "rlnode recipe list: %s: %v\n", name, err)
			return 1
		}
		fmt.Fprintf(tw, "%s\t%s\n", name, l.Description)
	}
	tw.Flush()
	return 0
}

// loadChecked loads a recipe and makes every check a run makes before it
// starts (train.Check), so that rlnode recipe validate, sbatch, run and
// eval refuse the same recipes with the same FILE:LINE messages.
func loadChecked(nameOrPath string, sets []string) (*recipes.Loaded, error) {
	l, err := recipes.Load(nameOrPath, sets)
	if err != nil {
		return nil, err
	}
	if err := train.Check(l); err != nil {
		return nil, err
	}
	return l, nil
}

// loadCheckedHere is loadChecked for a run in this process: the GPUs the
// recipe names must also be usable on this host (train.CheckHost).
func loadCheckedHere(nameOrPath string, sets []string) (*recipes.Loaded, error) {
	l, err := loadChecked(nameOrPath, sets)
	if err != nil {
		return nil, err
	}
	if err := train.CheckHost(l); err != nil {
		return nil, err
	}
	return l, nil
}

func recipeShowValidate(verb string, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rlnode recipe "+verb, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var sets repeated
	fs.Var(&sets, "set", "override KEY.PATH=VALUE (repeatable; VALUE is YAML)")
	resolved := false
	if verb == "show" {
		fs.BoolVar(&resolved, "resolved", false, "print every default filled in")
	}
	pos, code, ok := parseCommand(fs, args)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		fmt.Fprintf(stderr, "rlnode recipe %s: want one recipe (a built-in name or a file)\n\n%s", verb, recipeUsage)
		return 2
	}
	load := recipes.Load
	if verb == "validate" {
		load = loadChecked
	}
	l, err := load(pos[0], sets)
	if err != nil {
		printRecipeError(stderr, "recipe "+verb, pos[0], err)
		return 1
	}
	switch {
	case verb == "validate":
		steps := fmt.Sprintf("%d steps", l.Schedule.Steps)
		if l.SFT.Steps > 0 {
			upTo := ""
			if l.SFT.Until != nil {
				upTo = "up to "
			}
			steps = fmt.Sprintf("%s%d SFT warm-up steps, then %d RL steps", upTo, l.SFT.Steps, l.Schedule.Steps)
		}
		fmt.Fprintf(stdout, "%s: ok (%s, %s, %s episodes, %s)\n", pos[0], l.Name, l.Algorithm.Name, l.Episode.Type, steps)
	case resolved || len(sets) > 0:
		if err := l.WriteResolved(stdout); err != nil {
			fmt.Fprintf(stderr, "rlnode recipe show: %v\n", err)
			return 1
		}
	default:
		src, vsets, ok := recipes.BuiltinSource(pos[0])
		if !ok {
			if src, err = os.ReadFile(pos[0]); err != nil {
				fmt.Fprintf(stderr, "rlnode recipe show: %v\n", err)
				return 1
			}
		}
		if len(vsets) > 0 {
			fmt.Fprintf(stdout, "# %s is the recipe below with:", pos[0])
			for _, s := range vsets {
				fmt.Fprintf(stdout, " --set '%s'", s)
			}
			fmt.Fprintln(stdout)
		}
		_, _ = stdout.Write(src)
	}
	return 0
}
