package task

import (
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// SkillFile is the file that makes a directory an agent skill (the Agent
// Skills format SkillsBench ships: YAML frontmatter with name and
// description, then Markdown).
const SkillFile = "SKILL.md"

// Catalog is `proctor catalog scan`: an inventory of a checkout of tasks
// and skills. It marshals to JSON.
type Catalog struct {
	// Root is the scanned directory, absolute and symlink-resolved.
	Root string `json:"root"`
	// Counts are the totals.
	Counts CatalogCounts `json:"counts"`
	// Layouts, Categories and Difficulties count the loaded tasks by
	// layout, metadata.category and metadata.difficulty ("" when unset).
	Layouts      map[Layout]int `json:"layouts"`
	Categories   map[string]int `json:"categories"`
	Difficulties map[string]int `json:"difficulties"`
	// Tasks are the loaded tasks, sorted by name.
	Tasks []CatalogTask `json:"tasks"`
	// Skills are the SKILL.md files found anywhere under Root (symbolic
	// links not followed, so each is listed once), sorted by Dir.
	Skills []Skill `json:"skills"`
	// Skipped are author's notes and other directories passed over.
	Skipped []Skipped `json:"skipped,omitempty"`
	// Malformed are task definitions and SKILL.md files that do not parse,
	// listed without aborting the scan, sorted by file.
	Malformed []*Error `json:"malformed,omitempty"`
}

// CatalogCounts are a catalog's totals.
type CatalogCounts struct {
	Tasks       int `json:"tasks"`
	Runnable    int `json:"runnable"`    // neither unsupported nor blocked
	Unsupported int `json:"unsupported"` // unsupported or blocked
	Notes       int `json:"notes"`       // directories skipped with a warning
	Malformed   int `json:"malformed"`
	Skills      int `json:"skills"`
}

// CatalogTask is one task's line in a catalog.
type CatalogTask struct {
	Name        string   `json:"name"`
	Layout      Layout   `json:"layout"`
	Category    string   `json:"category,omitempty"`
	Difficulty  string   `json:"difficulty,omitempty"`
	Revision    string   `json:"revision"`
	Unsupported string   `json:"unsupported,omitempty"`
	Missing     []string `json:"missing,omitempty"`
	// Skills are the skill names under the task's environment/skills.
	Skills []string `json:"skills,omitempty"`
}

// Skill is one SKILL.md.
type Skill struct {
	// Name and Description come from the frontmatter.
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// Dir is the skill's directory relative to the root.
	Dir string `json:"dir"`
	// Task is the task whose directory holds the skill, or "".
	Task string `json:"task,omitempty"`
}

// ScanCatalog scans root with the default Loader; see Loader.ScanCatalog.
func ScanCatalog(root string) (*Catalog, error) { return defaultLoader.ScanCatalog(root) }

// ScanCatalog inventories a checkout: the tasks under root (as Coverage
// loads them: malformed definitions are listed, not fatal) and every
// SKILL.md. It returns an error only when root cannot be read.
func (l *Loader) ScanCatalog(root string) (*Catalog, error) {
	d, malformed, err := l.discover(root, true)
	if err != nil {
		return nil, err
	}
	c := &Catalog{
		Root:         d.Root,
		Layouts:      map[Layout]int{},
		Categories:   map[string]int{},
		Difficulties: map[string]int{},
		Tasks:        []CatalogTask{},
		Skills:       []Skill{},
		Skipped:      d.Skipped,
		Malformed:    malformed,
	}
	taskDirs := map[string]string{} // rel dir -> task name
	for _, t := range d.Tasks {
		ct := CatalogTask{
			Name: t.Name, Layout: t.Layout, Category: t.Category(), Difficulty: t.Difficulty(),
			Revision: t.Revision, Unsupported: firstNonEmpty(t.Unsupported, t.Blocked), Missing: t.Missing,
		}
		if t.EnvironmentDir != "" {
			ct.Skills = skillNames(filepath.Join(t.EnvironmentDir, "skills"))
		}
		c.Tasks = append(c.Tasks, ct)
		c.Layouts[t.Layout]++
		c.Categories[t.Category()]++
		c.Difficulties[t.Difficulty()]++
		if ct.Unsupported != "" {
			c.Counts.Unsupported++
		} else {
			c.Counts.Runnable++
		}
		if rel, err := filepath.Rel(d.Root, t.Dir); err == nil {
			taskDirs[filepath.ToSlash(rel)] = t.Name
		}
	}

	err = filepath.WalkDir(d.Root, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			if de != nil && de.IsDir() && p != d.Root {
				return fs.SkipDir
			}
			return nil
		}
		if de.IsDir() && p != d.Root && strings.HasPrefix(de.Name(), ".") {
			return fs.SkipDir
		}
		if de.IsDir() || de.Name() != SkillFile || !de.Type().IsRegular() {
			return nil
		}
		relFile, _ := filepath.Rel(d.Root, p)
		relFile = filepath.ToSlash(relFile)
		relDir := filepath.ToSlash(filepath.Dir(relFile))
		s, perr := readSkill(p)
		if perr != nil {
			c.Malformed = append(c.Malformed, inFile(relFile, perr))
			return nil
		}
		s.Dir = relDir
		s.Task = owningTask(relDir, taskDirs)
		c.Skills = append(c.Skills, s)
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(c.Skills, func(i, j int) bool { return c.Skills[i].Dir < c.Skills[j].Dir })
	sort.Slice(c.Malformed, func(i, j int) bool { return c.Malformed[i].File < c.Malformed[j].File })
	c.Counts.Tasks = len(c.Tasks)
	c.Counts.Notes = len(c.Skipped)
	c.Counts.Malformed = len(c.Malformed)
	c.Counts.Skills = len(c.Skills)
	return c, nil
}

// readSkill parses a SKILL.md's frontmatter with the task.md rules (no
// aliases, bounded depth) and requires a name.
func readSkill(path string) (Skill, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Skill{}, err
	}
	doc, err := SplitFrontmatter(data)
	if err != nil {
		return Skill{}, err
	}
	if !doc.HasFrontmatter {
		return Skill{}, errAt(1, "", "SKILL.md has no YAML frontmatter")
	}
	fm, pos, err := parseYAMLMapping(doc.Frontmatter, doc.FrontmatterLine)
	if err != nil {
		return Skill{}, err
	}
	name, _ := fm["name"].(string)
	if strings.TrimSpace(name) == "" {
		return Skill{}, errAt(pos.line("name"), "name", "SKILL.md frontmatter has no name")
	}
	desc, _ := fm["description"].(string)
	return Skill{Name: name, Description: desc}, nil
}

// skillNames lists the subdirectories of dir that hold a SKILL.md.
func skillNames(dir string) []string {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, de := range des {
		if isFile(filepath.Join(dir, de.Name(), SkillFile)) {
			out = append(out, de.Name())
		}
	}
	return out
}

func owningTask(relDir string, taskDirs map[string]string) string {
	for d := relDir; ; {
		if name, ok := taskDirs[d]; ok {
			return name
		}
		if d == "." || d == "" {
			return ""
		}
		i := strings.LastIndexByte(d, '/')
		if i < 0 {
			d = "."
		} else {
			d = d[:i]
		}
	}
}
