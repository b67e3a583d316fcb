// Package recipescmd is kiln recipes: the curated recipe catalog
// (recipes) listed, shown, and written out as kiln.yaml.
//
// NewCmdRecipes(f) wires NewCmdRecipesList, NewCmdRecipesShow and
// NewCmdRecipesInit, each (f, runF): runF, when not nil, gets the parsed
// RecipesOptions instead of the command running.
package recipescmd
